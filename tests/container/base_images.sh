#!/usr/bin/env bash
# Makes the local base images debian:12 and debian:12-slim when the engine lacks them (no Docker
# Hub needed): debootstrap --variant=minbase bookworm from the Debian mirror this machine's apt
# uses (read from the apt configuration now, never written into the repository), with the host's
# apt sources and apt.conf.d settings copied in, then `docker import`. Needs DOCKER_HOST set
# (tests/container/dockerd.sh env) and root.
set -euo pipefail
docker=/usr/bin/docker

have() { $docker image inspect "$1" >/dev/null 2>&1; }
if have debian:12 && have debian:12-slim; then
  echo "base images: debian:12 and debian:12-slim present" >&2
  exit 0
fi

# The first deb URI of the main archive: deb822 .sources files first, then one-line lists.
mirror=$(
  { cat /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '
      /^Types:/ {deb = ($0 ~ /(^|[ \t])deb([ \t]|$)/)}
      /^URIs:/ && deb {for (i = 2; i <= NF; i++) print $i}'
    cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null \
      | awk '$1 == "deb" {for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) {print $i; break}}'
  } | grep -v -- '-security' | head -n1 || true)
[ -n "$mirror" ] || { echo "base images: no Debian mirror found in /etc/apt" >&2; exit 1; }
echo "base images: debootstrap bookworm from $mirror" >&2

command -v debootstrap >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
  -o DPkg::Lock::Timeout=600 --no-install-recommends debootstrap >&2

dir=$(mktemp -d /tmp/mha-debootstrap.XXXXXX)
trap 'rm -rf "$dir"' EXIT
debootstrap --variant=minbase bookworm "$dir" "$mirror" >"$dir.log" 2>&1 \
  || { tail -n 30 "$dir.log" >&2; rm -f "$dir.log"; exit 1; }
rm -f "$dir.log"
# The host's apt sources and settings (mirror, proxy, snapshot pins) so that apt in the image
# reaches what the host reaches; the debootstrap's own sources.list would duplicate them.
rm -f "$dir/etc/apt/sources.list"
cp -a /etc/apt/sources.list.d/. "$dir/etc/apt/sources.list.d/" 2>/dev/null || true
[ -f /etc/apt/sources.list ] && cp -a /etc/apt/sources.list "$dir/etc/apt/sources.list"
cp -a /etc/apt/apt.conf.d/. "$dir/etc/apt/apt.conf.d/" 2>/dev/null || true
# Keys the copied sources may name (Signed-By).
cp -an /usr/share/keyrings/. "$dir/usr/share/keyrings/" 2>/dev/null || true
cp -an /etc/apt/trusted.gpg.d/. "$dir/etc/apt/trusted.gpg.d/" 2>/dev/null || true
rm -rf "$dir/var/cache/apt/archives/"*.deb "$dir/var/lib/apt/lists/"*
tar -C "$dir" -c . | $docker import - debian:12 >/dev/null
$docker tag debian:12 debian:12-slim
echo "base images: imported debian:12 and debian:12-slim" >&2
