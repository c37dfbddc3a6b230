#!/bin/sh
# Unmodified programs under libgsock-preload.so: with no RDMA device every
# socket takes the kernel route, and each program must behave exactly as
# without the preload: the same bytes arrive, the same answers come back.
# Each run also shows (GSOCK_LOG=debug) that the preload made its decisions.
. "${GSOCK_SRC:-$(dirname "$0")/..}/t/lib.sh"
[ -f "$PRELOAD" ] || skip_all "libgsock-preload.so is not built"
for p in nc curl redis-server redis-cli redis-benchmark memcached sockperf iperf3 nginx wrk python3; do
	command -v $p >/dev/null || skip_all "$p is not installed (scripts/setup installs it)"
done
time_limit 240
plan 21
PL="env LD_PRELOAD=$PRELOAD GSOCK_LOG=debug"
head -c 3000000 /dev/urandom >"$TMP/data"
decided() { grep -q "kernel, by the default route" "$1"; }

# nc: both ends preloaded, then only one end.
port=$(free_port)
bg_preloaded ncl nc -l 127.0.0.1 "$port"
wait_listen "$port"
timeout 20 $PL nc -N 127.0.0.1 "$port" <"$TMP/data" 2>"$TMP/ncc.err"
wait "$LAST_PID"
cmp -s "$TMP/data" "$TMP/ncl.out"
ok $? "nc -> nc -l, both preloaded: 3 MB arrive intact"
decided "$TMP/ncc.err" && grep -q "server at 127.0.0.1:$port): kernel" "$TMP/ncl.err"
ok $? "nc: the client's and the server's route decisions are logged"
port=$(free_port)
nc -l 127.0.0.1 "$port" >"$TMP/plain.out" 2>/dev/null &
PIDS="$PIDS $!"; plain=$!
wait_listen "$port"
timeout 20 $PL nc -N 127.0.0.1 "$port" <"$TMP/data" 2>/dev/null
wait "$plain"
cmp -s "$TMP/data" "$TMP/plain.out"
ok $? "preloaded nc -> plain nc -l: intact"

# curl against python3 -m http.server
mkdir -p "$TMP/www" && cp "$TMP/data" "$TMP/www/data"
port=$(free_port)
(cd "$TMP/www" && exec env LD_PRELOAD="$PRELOAD" GSOCK_LOG=debug python3 -m http.server --bind 127.0.0.1 "$port" >"$TMP/http.out" 2>"$TMP/http.err") &
PIDS="$PIDS $!"
wait_listen "$port"
timeout 20 $PL curl -sf -o "$TMP/curl.out" "http://127.0.0.1:$port/data" 2>"$TMP/curl.err"
cmp -s "$TMP/data" "$TMP/curl.out"
ok $? "curl <- python3 http.server, both preloaded: 3 MB intact"
curl -sf -o "$TMP/curl2.out" "http://127.0.0.1:$port/data"
cmp -s "$TMP/data" "$TMP/curl2.out"
ok $? "plain curl <- preloaded http.server: intact"

# redis
port=$(free_port)
bg_preloaded redis redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no
wait_listen "$port"
value=$(head -c 600 /dev/urandom | base64 -w0)
timeout 10 $PL redis-cli -p "$port" set k "$value" >/dev/null 2>&1
is "$(timeout 10 $PL redis-cli -p "$port" get k 2>/dev/null)" "$value" "redis-cli set/get through preloaded redis-server"
timeout 60 $PL redis-benchmark -p "$port" -t set,get,lpush -n 3000 -c 8 -q 2>"$TMP/rb.err" | tr '\r' '\n' | grep -a 'requests per second' >"$TMP/rb.out"
grep -q '^SET: ' "$TMP/rb.out" && grep -q '^GET: ' "$TMP/rb.out" && grep -q '^LPUSH: ' "$TMP/rb.out"
ok $? "redis-benchmark (8 connections) completes SET, GET, LPUSH"
sed 's/^/# /' "$TMP/rb.out"
decided "$TMP/rb.err"
ok $? "redis-benchmark's connections were routed by the preload"

# memcached, with a python3 client speaking its text protocol
port=$(free_port)
bg_preloaded memcached memcached -p "$port" -U 0 -l 127.0.0.1 -u root -t 2
wait_listen "$port"
timeout 30 $PL python3 - "$port" >"$TMP/mc.out" 2>"$TMP/mc.err" <<'PY'
import os, socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
f = s.makefile("rwb")
vals = {f"key{i}": os.urandom(1 + i * 97 % 5000) for i in range(200)}
for k, v in vals.items():
    f.write(b"set %s 0 0 %d\r\n%s\r\n" % (k.encode(), len(v), v)); f.flush()
    assert f.readline() == b"STORED\r\n"
bad = 0
for k, v in vals.items():
    f.write(b"get %s\r\n" % k.encode()); f.flush()
    head = f.readline().split()
    data = f.read(int(head[3]) + 2)[:-2]
    assert f.readline() == b"END\r\n"
    bad += data != v
print("ok" if not bad else "bad %d" % bad)
PY
is "$(cat "$TMP/mc.out")" ok "memcached: 200 values set and got back intact"

# sockperf: ping-pong and throughput, preloaded and mixed
port=$(free_port)
bg_preloaded sockperf sockperf sr --tcp -i 127.0.0.1 -p "$port"
wait_listen "$port"
timeout 20 $PL sockperf pp --tcp -i 127.0.0.1 -p "$port" -t 1 >"$TMP/pp.out" 2>&1
grep -q "Summary: Latency is" "$TMP/pp.out"
ok $? "sockperf ping-pong, both preloaded"
grep "Summary: Latency is" "$TMP/pp.out" | sed 's/^/# /'
timeout 20 $PL sockperf tp --tcp -i 127.0.0.1 -p "$port" -t 1 -m 1400 >"$TMP/tp.out" 2>&1
grep -q "Summary: Message Rate is" "$TMP/tp.out"
ok $? "sockperf throughput, both preloaded"
timeout 20 sockperf pp --tcp -i 127.0.0.1 -p "$port" -t 1 >"$TMP/pp2.out" 2>&1
grep -q "Summary: Latency is" "$TMP/pp2.out"
ok $? "plain sockperf client -> preloaded server"

# iperf3
port=$(free_port)
bg_preloaded iperf3 iperf3 -s -p "$port" -1
wait_listen "$port"
timeout 30 $PL iperf3 -c 127.0.0.1 -p "$port" -t 1 >"$TMP/ip.out" 2>"$TMP/ip.err"
[ $? -eq 0 ] && grep -q receiver "$TMP/ip.out"
ok $? "iperf3 client and server, preloaded"
grep receiver "$TMP/ip.out" | sed 's/^/# /'

# nginx (epoll, sendfile, a forked worker) serving a file to curl and wrk
port=$(free_port)
mkdir -p "$TMP/nginx"
cat >"$TMP/nginx.conf" <<EOF
daemon off;
worker_processes 1;
pid $TMP/nginx/nginx.pid;
error_log $TMP/nginx/error.log;
events { use epoll; worker_connections 256; }
http {
	sendfile on;
	access_log off;
	client_body_temp_path $TMP/nginx/body;
	proxy_temp_path $TMP/nginx/proxy;
	fastcgi_temp_path $TMP/nginx/fastcgi;
	uwsgi_temp_path $TMP/nginx/uwsgi;
	scgi_temp_path $TMP/nginx/scgi;
	server { listen 127.0.0.1:$port; root $TMP/www; }
}
EOF
chmod 755 "$TMP" "$TMP/www" && chmod 644 "$TMP/www/data" # nginx's worker may run as another user
bg_preloaded nginx nginx -c "$TMP/nginx.conf" -p "$TMP/nginx"
wait_listen "$port"
timeout 20 $PL curl -sf -o "$TMP/ng.out" "http://127.0.0.1:$port/data" 2>/dev/null
cmp -s "$TMP/data" "$TMP/ng.out"
ok $? "curl <- nginx (sendfile), both preloaded: intact"
timeout 30 $PL wrk -t1 -c8 -d1s "http://127.0.0.1:$port/data" >"$TMP/wrk.out" 2>"$TMP/wrk.err"
awk '/^Requests\/sec:/ { ok = $2 > 0 } END { exit !ok }' "$TMP/wrk.out" && ! grep -q 'Non-2xx' "$TMP/wrk.out" && ! grep -q 'Socket errors' "$TMP/wrk.out"
ok $? "wrk -> nginx, both preloaded: answers came, every one 200, no socket errors"
grep 'Requests/sec' "$TMP/wrk.out" | sed 's/^/# /'
grep -q "server at 127.0.0.1:$port): kernel" "$TMP/nginx.err"
ok $? "nginx's listening socket was routed by the preload"

# python asyncio server and client
port=$(free_port)
cat >"$TMP/aio.py" <<'PY'
import asyncio, os, sys
async def serve(r, w):
    while data := await r.read(65536):
        w.write(data); await w.drain()
    w.close()
async def client(port):
    r, w = await asyncio.open_connection("127.0.0.1", port)
    payload = os.urandom(2_000_000)
    w.write(payload); await w.drain(); w.write_eof()
    got = await r.read(-1)
    print("ok" if got == payload else "bad %d" % len(got))
async def main():
    port = int(sys.argv[2])
    if sys.argv[1] == "server":
        srv = await asyncio.start_server(serve, "127.0.0.1", port)
        async with srv: await srv.serve_forever()
    else:
        await client(port)
asyncio.run(main())
PY
bg_preloaded aios python3 "$TMP/aio.py" server "$port"
wait_listen "$port"
is "$(timeout 30 $PL python3 "$TMP/aio.py" client "$port" 2>/dev/null)" ok "python asyncio client <-> server, both preloaded: 2 MB echoed"

# a server that forks a child per connection
port=$(free_port)
cat >"$TMP/fork.py" <<'PY'
import os, socket, sys
ls = socket.socket(); ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind(("127.0.0.1", int(sys.argv[1]))); ls.listen(16)
while True:
    c, _ = ls.accept()
    if os.fork() == 0:
        ls.close()
        while data := c.recv(65536):
            c.sendall(data)
        os._exit(0)
    c.close()
PY
bg_preloaded fork python3 "$TMP/fork.py" "$port"
wait_listen "$port"
timeout 60 $PL python3 "$PY" concurrent "$port" 6 7 >"$TMP/fork.out" 2>&1
ok $? "a forking server (child per connection) echoes 6 concurrent clients intact"
timeout 30 $PL python3 "$PY" sizes "$port" 1 65536 1000000 >/dev/null 2>&1
ok $? "and sequential ones"

# exec: the preload and its decisions survive exec
port=$(free_port)
bg_preloaded execl nc -l 127.0.0.1 "$port"
wait_listen "$port"
echo exec-ok | timeout 10 env LD_PRELOAD="$PRELOAD" GSOCK_LOG=debug sh -c "exec nc -N 127.0.0.1 $port" 2>"$TMP/exec.err"
wait "$LAST_PID"
is "$(cat "$TMP/execl.out")" exec-ok "a program exec'd under the preload talks"
decided "$TMP/exec.err"
ok $? "and the exec'd program's socket was routed by the preload"
finish
