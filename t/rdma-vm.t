#!/bin/sh
# The Soft-RoCE tests: scripts/rdma-vm boots a QEMU guest with rdma_rxe and
# this tree's programs, runs t/rdma/guest.sh there, and relays its TAP.
# Skips where QEMU or debootstrap cannot be had (they need root to install).
set -u
top=$(cd "${GSOCK_SRC:-$(dirname "$0")/..}" && pwd)
if [ -n "${GSOCK_SKIP_VM:-}" ]; then echo "1..0 # SKIP GSOCK_SKIP_VM is set"; exit 0; fi
cd "${GSOCK_BUILD:-$top}"
exec "$top/scripts/rdma-vm"
