#!/usr/bin/env python3
"""Runs each ctest test of a build (not the container tier) alone under resource accounting."""
import json, os, resource, subprocess, sys, time
build = sys.argv[1]
d = json.loads(subprocess.check_output(['ctest', '--test-dir', build, '--show-only=json-v1']))
rows = []
for t in d['tests']:
    p = {x['name']: x['value'] for x in t.get('properties', [])}
    if 'container' in (p.get('LABELS') or []):
        continue
    env = dict(os.environ)
    for kv in p.get('ENVIRONMENT', []) or []:
        k, _, v = kv.partition('='); env[k] = v
    wd = p.get('WORKING_DIRECTORY', build)
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN); s = time.time()
    rc = subprocess.run(t['command'], cwd=wd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    rows.append((cpu, time.time() - s, rc, t['name']))
    print(f"{cpu:8.2f} {time.time()-s:8.2f} {rc:3d} {t['name']}", flush=True)
print('total cpu', sum(r[0] for r in rows), 'wall', sum(r[1] for r in rows))
