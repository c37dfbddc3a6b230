#!/bin/sh
# README.md's first program, as a newcomer copies it: the first ```c block
# of "Writing a g-call program" is cut out of README.md, built against
# this build tree with the C compiler (host backend) and with nvcc (cuda
# backend, where configure found CUDA), without a warning, and the
# backend under test runs it: nc and a g-call client get their bytes back
# from its blocks, a port that is taken makes every block say why and the
# program fail, and SIGTERM ends it cleanly with its count of clients.
. "${GSOCK_SRC:-$(dirname "$0")/..}/t/lib.sh"
need_backend
time_limit 300
plan 11
var() { sed -n "s|^$1 = ||p" "$GSOCK_BUILD/Makefile" | head -1; }
# readme_c HEADING: the first ```c block after README.md's line HEADING
readme_c() {
	awk -v h="$1" '$0 == h { sec = 1 }
		sec && /^```c$/ && !done { on = 1; next }
		on && /^```$/ { on = 0; done = 1 }
		on' "$GSOCK_SRC/README.md"
}
# The installed layout, from the build tree: gsock.h and gsock.cuh side by side.
# build_host SRC OUT / build_cuda SRC OUT: compile without a warning,
# the compiler's words in OUT.err
build_host() {
	${CC:-cc} -Wall -Wextra -Werror -o "$2" "$1" -I"$GSOCK_SRC/devlib" \
		"$GSOCK_BUILD/devlib/libgsock-host.a" -lpthread >"$2.err" 2>&1
}
NVCC=$(var NVCC)
build_cuda() {
	# shellcheck disable=SC2046
	"$NVCC" -x cu -Werror all-warnings -o "$2" "$1" -I"$GSOCK_SRC/devlib" \
		$(var CUDA_CPPFLAGS) -L"$GSOCK_BUILD/devlib" -lgsock-cuda $(var CUDA_RT_LDFLAGS) \
		$(var CUDA_LIBS) -lpthread >"$2.err" 2>&1
}

readme_c '## Writing a g-call program' >"$TMP/echo.c"
grep -q '^int main' "$TMP/echo.c" && grep -q '^GSOCK_KERNEL' "$TMP/echo.c"
ok $? "README.md carries a whole program: a kernel and main ($(wc -l <"$TMP/echo.c") lines)"

build_host "$TMP/echo.c" "$TMP/echo-host"
r=$?
ok $r "cc -Wall -Wextra -Werror builds it for the host backend"
[ $r = 0 ] || sed 's/^/#   /' "$TMP/echo-host.err" | head -20

if [ -f "$GSOCK_BUILD/devlib/libgsock-cuda.a" ] && [ -n "$NVCC" ]; then
	build_cuda "$TMP/echo.c" "$TMP/echo-cuda"
	r=$?
	ok $r "nvcc -x cu builds the same file for the cuda backend"
	[ $r = 0 ] || sed 's/^/#   /' "$TMP/echo-cuda.err" | head -20
else
	echo "ok $((tap_n += 1)) # SKIP this build has no cuda backend (configure found no CUDA toolkit)"
fi

start_gsockd || exit 1
P=$(free_port)
"$TMP/echo-$BACKEND" "$P" >"$TMP/echo.out" 2>"$TMP/echo.err" &
EPID=$!
PIDS="$PIDS $EPID"
wait_listen "$P"
grep -q "^echo: 8 blocks on port $P$" "$TMP/echo.out"
ok $? "it starts 8 blocks listening on port $P"

want=4 # clients: the g-call client's blocks, and nc's 9 where it runs
if command -v nc >/dev/null 2>&1; then
	want=13
	got=$(printf 'hello, gsock\n' | timeout 20 nc -N 127.0.0.1 "$P")
	is "$got" "hello, gsock" "nc gets its line back"
	# eight at once: SO_REUSEPORT spreads them over the blocks
	ncs=""
	for i in 1 2 3 4 5 6 7 8; do
		seq "$i" 2000 | timeout 30 nc -N 127.0.0.1 "$P" >"$TMP/nc$i" &
		ncs="$ncs $!"
	done
	# shellcheck disable=SC2086
	wait $ncs
	bad=0
	for i in 1 2 3 4 5 6 7 8; do
		seq "$i" 2000 | cmp -s - "$TMP/nc$i" || { bad=1; echo "# client $i got $(wc -c <"$TMP/nc$i") bytes"; }
	done
	ok $bad "eight nc clients at once each get their own bytes back"
else
	echo "ok $((tap_n += 1)) # SKIP nc is not installed (scripts/setup installs netcat-openbsd)"
	echo "ok $((tap_n += 1)) # SKIP nc is not installed (scripts/setup installs netcat-openbsd)"
fi
timeout 60 "$CLIENT" -n 3000 -i 200 -b 4 127.0.0.1:"$P" >"$TMP/client.out" 2>&1
r=$?
ok $r "a g-call client: 4 blocks, 200 round trips of 3000 bytes each, every byte checked"
[ $r = 0 ] || sed 's/^/#   /' "$TMP/client.out" | tail -5

kill -TERM "$EPID"
wait "$EPID"
r=$?
served=$(sed -n 's/^echo: served \([0-9]*\) clients$/\1/p' "$TMP/echo.out")
[ $r = 0 ] && [ ! -s "$TMP/echo.err" ] && [ "${served:-0}" = $want ]
ok $? "SIGTERM ends it: status $r, nothing on stderr, served ${served:-?} clients of $want"

# A port somebody holds without SO_REUSEPORT: every block fails its bind.
python3 -c '
import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
print(s.getsockname()[1], flush=True); time.sleep(60)' >"$TMP/holder" &
PIDS="$PIDS $!"
for _ in $(seq 100); do [ -s "$TMP/holder" ] && break; sleep 0.05; done
H=$(cat "$TMP/holder")
timeout 60 "$TMP/echo-$BACKEND" "$H" >"$TMP/busy.out" 2>"$TMP/busy.err"
r=$?
n=$(grep -c '^echo: block [0-7]: Address already in use$' "$TMP/busy.err")
[ $r = 1 ] && [ "$n" = 8 ]
ok $? "a taken port: status $r, $n of 8 blocks said 'Address already in use'"
[ "$n" = 8 ] || sed 's/^/#   /' "$TMP/busy.err" | head -5

# README.md's server-layer example ("On the server layer"), built for
# the backend under test as the first program is: it echoes, and its
# report at SIGTERM counts every byte it sent back.
readme_c '### On the server layer' >"$TMP/srv.c"
"build_$BACKEND" "$TMP/srv.c" "$TMP/srv"
r=$?
ok $r "the server-layer example ($(wc -l <"$TMP/srv.c") lines) builds for the $BACKEND backend without a warning"
[ $r = 0 ] || sed 's/^/#   /' "$TMP/srv.err" | head -20
P=$(free_port)
"$TMP/srv" -l 127.0.0.1:"$P" -b 2 >"$TMP/srv.out" 2>"$TMP/srv.stderr" &
SPID=$!
PIDS="$PIDS $SPID"
wait_listen "$P"
# three clients, 20 messages of 150 bytes each, every echo checked: 9000 bytes
got=$(timeout 60 python3 -c '
import socket, sys
bad = 0
cs = [socket.create_connection(("127.0.0.1", int(sys.argv[1]))) for _ in range(3)]
for i in range(20):
    for k, c in enumerate(cs):
        m = bytes((i * 7 + k + j) % 251 for j in range(150))
        c.sendall(m)
        b = b""
        while len(b) < len(m):
            x = c.recv(len(m) - len(b))
            if not x:
                break
            b += x
        bad += b != m
for c in cs:
    c.close()
print("bad=%d" % bad)' "$P")
kill -TERM "$SPID"
wait "$SPID"
r=$?
report=$(grep 'served' "$TMP/srv.out")
echo "$report" | grep -q '^echo: served [0-9]* requests on 3 connections, 9000 bytes, 0 errors$' &&
	[ "$got" = bad=0 ] && [ $r = 0 ]
ok $? "it echoes 3 clients' 9000 bytes ($got), ends at SIGTERM (status $r) and reports them: $report"
[ -s "$TMP/srv.stderr" ] && sed 's/^/#   /' "$TMP/srv.stderr" | head -5
finish
