# Sourced by the service tier's shell wrappers (run_python_example.sh, run_shm_test.sh).
# wait_for_port_file PID PORT_FILE LOG: waits (up to 60 s) until the server PID has written its
# port file; exits 1 with the server's log when it exited first or never wrote it.
wait_for_port_file() {
  _i=0
  while [ ! -s "$2" ]; do
    if ! kill -0 "$1" 2>/dev/null; then echo "mha-server exited early:"; cat "$3"; exit 1; fi
    _i=$((_i + 1))
    if [ "$_i" -gt 1200 ]; then echo "mha-server did not start:"; cat "$3"; exit 1; fi
    sleep 0.05
  done
}
