#!/bin/sh
# How the preload picks routes: rules from gsock.conf (first match wins),
# GSOCK_TRANSPORT, a broken rules file (reported with its line; the
# program runs on the kernel route), and one port namespace with the GPU
# endpoints of gsockd.
. "${GSOCK_SRC:-$(dirname "$0")/..}/t/lib.sh"
[ -f "$PRELOAD" ] || skip_all "libgsock-preload.so is not built"
command -v nc >/dev/null || skip_all "nc (netcat-openbsd) is not installed"
time_limit 120
plan 12

# One transfer from a preloaded nc to a plain nc -l; its stderr in $TMP/$1.err.
transfer() {
	name=$1; shift
	port=$(free_port)
	nc -l 127.0.0.1 "$port" >"$TMP/$name.out" 2>/dev/null &
	srv=$!
	wait_listen "$port"
	echo "payload $name" | timeout 10 env LD_PRELOAD="$PRELOAD" "$@" nc -N 127.0.0.1 "$port" 2>"$TMP/$name.err"
	wait "$srv"
	[ "$(cat "$TMP/$name.out")" = "payload $name" ]
}

cat >"$TMP/rules.conf" <<'EOF'
preload {
	rule {
		program = "nc"
		role = "client"
		address = "127.0.0.0/8"
		route = "rsocket"
	}
	rule {
		route = "os"
	}
}
EOF
transfer rule GSOCK_CONF="$TMP/rules.conf" GSOCK_LOG=info
ok $? "a rule sending nc to rsocket: the bytes still arrive"
grep -q "asks for rsocket, but this host has no RDMA device; using the kernel" "$TMP/rule.err" &&
	grep -q "the rule ending at line 7" "$TMP/rule.err"
ok $? "the decision names the first matching rule and why the kernel carries it"

sed -i 's/program = "nc"/program = "curl"/' "$TMP/rules.conf"
transfer second GSOCK_CONF="$TMP/rules.conf" GSOCK_LOG=debug
ok $? "when the first rule does not match (program), the next one decides"
grep -q "kernel, by the rule ending at line 10" "$TMP/second.err"
ok $? "and the log names that rule"

transfer forced GSOCK_CONF="$TMP/rules.conf" GSOCK_TRANSPORT=os GSOCK_LOG=debug
grep -q "kernel, by GSOCK_TRANSPORT" "$TMP/forced.err"
ok $? "GSOCK_TRANSPORT=os overrides the rules"

transfer bogus GSOCK_TRANSPORT=fast
grep -q "GSOCK_TRANSPORT=fast is not auto, rsocket or os; using auto" "$TMP/bogus.err"
ok $? "an unknown GSOCK_TRANSPORT is reported"

printf 'preload {\n\trule {\n\t\tports = "80-70"\n\t\troute = "os"\n\t}\n}\n' >"$TMP/bad.conf"
transfer bad GSOCK_CONF="$TMP/bad.conf"
ok $? "a broken rules file: the program still works"
grep -q "bad.conf:3: ports: \"80-70\" is not PORT, LOW-HIGH" "$TMP/bad.err" &&
	grep -q "every socket takes the kernel route" "$TMP/bad.err"
ok $? "and the preload names the file, line and key, and the route it falls back to"
"$GSOCKD" --check-conf --conf "$TMP/bad.conf" 2>"$TMP/check.err"
is $? 78 "gsockd --check-conf rejects the same file"

transfer missing GSOCK_CONF="$TMP/no-such.conf" && grep -q "cannot read configuration $TMP/no-such.conf" "$TMP/missing.err"
ok $? "a GSOCK_CONF that does not exist: reported, the program works"

# One port namespace with gsockd's GPU endpoints.
start_gsockd
start_server -l 127.0.0.1:0 -b 2
env LD_PRELOAD="$PRELOAD" python3 -c '
import errno, socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
try:
    s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(); print("bound")
except OSError as e:
    print("in use" if e.errno == errno.EADDRINUSE else e)' "$PORT" >"$TMP/bind.out" 2>&1
is "$(cat "$TMP/bind.out")" "in use" "a preloaded CPU server cannot take a port a GPU server holds"
port=$(free_port)
env LD_PRELOAD="$PRELOAD" nc -l 127.0.0.1 "$port" >/dev/null 2>&1 &
PIDS="$PIDS $!"
wait_listen "$port"
"$SERVER" -l "127.0.0.1:$port" -b 1 >/dev/null 2>"$TMP/gpu.err"
grep -q "cannot listen on 127.0.0.1:$port: Address already in use" "$TMP/gpu.err"
ok $? "a GPU server cannot take a port a preloaded CPU server holds"
finish
