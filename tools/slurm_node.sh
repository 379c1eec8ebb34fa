#!/usr/bin/env bash
# A machine ready for tests/launch/test_slurm_template.py: Debian's slurm-wlm and munge installed, and
# munged running (the test starts its own slurmctld and slurmd from a slurm.conf of its own, on free
# ports, and stops them). Needs root (apt-get, and slurmd starts job steps as root); does nothing more
# where all of it is already there. `make slurm-node` runs it; CI runs that before the tests.
set -euo pipefail

if [ "$(id -u)" != 0 ]; then
  echo "slurm-node: not root: the SLURM test needs root and will say so" >&2
  exit 0
fi

need=()
for bin in sbatch slurmctld slurmd munged munge unmunge; do
  command -v "$bin" >/dev/null 2>&1 || need=(slurm-wlm munge)
done
if [ "${#need[@]}" -gt 0 ]; then
  echo "slurm-node: installing ${need[*]} (Debian packages)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# munge's key comes with its package; a machine without one gets a fresh random key.
if [ ! -s /etc/munge/munge.key ]; then
  install -d -o munge -g munge -m 0700 /etc/munge
  dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 status=none
  chown munge:munge /etc/munge/munge.key
  chmod 0400 /etc/munge/munge.key
fi

if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
  echo "slurm-node: munged already answers"
  exit 0
fi
install -d -o munge -g munge -m 0755 /run/munge
runuser -u munge -- /usr/sbin/munged
for _ in $(seq 50); do
  if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
    echo "slurm-node: munged started"
    exit 0
  fi
  sleep 0.1
done
echo "slurm-node: munged started but does not answer (see /var/log/munge/munged.log)" >&2
exit 1
