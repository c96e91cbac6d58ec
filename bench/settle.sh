# Sourced by the bench scripts that run one scale run after another:
# `settle` waits (up to 180 s) until the kernel has freed the TCP sockets
# of the last run. A deleted namespace's sockets are freed in the
# background (netns cleanup work); without the wait the next run's ramp
# and first broadcast share the CPU with it.
settle() {
  for _ in $(seq 180); do
    [ "$(awk '$1=="TCP"{print $2}' /proc/slabinfo)" -lt 20000 ] && return
    sleep 1
  done
  echo "$(basename "$0"): the kernel still holds many TCP sockets; measuring anyway" >&2
}
