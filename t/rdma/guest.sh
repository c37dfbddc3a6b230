#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Runs inside the Soft-RoCE VM (scripts/rdma-vm) as part of its init:
# brings up rxe on a dummy device (setup.sh) and tests gsock over it,
# printing TAP.
# RDMA use is proven from rxe's packet counters, kernel TCP use from
# /proc/net/snmp, read before and after each transfer.
. /gsock/setup.sh

# One 1 MB transfer from nc to nc -l with env $1 on the ends named by $2
# (both, client or server; the other end runs plain). Sets RXE (rxe
# packets sent) and TCP (TCP segments sent) during it.
transfer() {
	cenv="env" senv="env"
	[ "$2" != server ] && cenv="env LD_PRELOAD=$PRELOAD GSOCK_LOG=info $1"
	[ "$2" != client ] && senv="env LD_PRELOAD=$PRELOAD GSOCK_LOG=info $1"
	head -c 1000000 /dev/urandom >/tmp/in
	r0=$(rxe_pkts) t0=$(tcp_segs)
	$senv timeout 60 nc -l $IP 7000 >/tmp/out 2>/tmp/srv.err &
	sleep 1
	$cenv timeout 60 nc -N $IP 7000 </tmp/in 2>/tmp/cli.err
	wait
	RXE=$(($(rxe_pkts) - r0)) TCP=$(($(tcp_segs) - t0))
	echo "# rxe packets sent +$RXE, TCP segments sent +$TCP"
	cmp -s /tmp/in /tmp/out
}

transfer "GSOCK_TRANSPORT=auto" both
ok $? "preloaded nc -> nc -l, default route: 1 MB intact"
[ "$RXE" -lt 100 ] && [ "$TCP" -gt 10 ]
ok $? "the default route is the kernel: TCP carried it, rxe stayed idle"

transfer "GSOCK_TRANSPORT=rsocket" both
ok $? "netcat-openbsd (sets SO_REUSEPORT) on the rsocket route: 1 MB intact"
sed 's/^/# client: /' /tmp/cli.err; sed 's/^/# server: /' /tmp/srv.err
[ "$RXE" -gt 500 ] && [ "$TCP" -lt 10 ]
ok $? "rxe carried it, not TCP"

transfer "GSOCK_TRANSPORT=rsocket" client
ok $? "preloaded client -> plain server: 1 MB intact (rsocket refused, the kernel took over)"
[ "$TCP" -gt 10 ]
ok $? "and TCP carried it"

transfer "GSOCK_TRANSPORT=rsocket" server
ok $? "plain client -> preloaded rsocket server: 1 MB intact (the server listens on the kernel too)"

# sockperf ping-pong and throughput, rsocket against the kernel, with the
# server polling (-F poll).
echo "T:$IP:7100" >/tmp/feed
for route in os rsocket; do
	env LD_PRELOAD=$PRELOAD GSOCK_TRANSPORT=$route timeout 60 sockperf sr -f /tmp/feed -F poll >/dev/null 2>&1 &
	sp=$!
	sleep 1
	r0=$(rxe_pkts)
	env LD_PRELOAD=$PRELOAD GSOCK_TRANSPORT=$route timeout 60 sockperf pp --tcp -i $IP -p 7100 -t 3 -m 64 >/tmp/pp.$route 2>&1
	echo "# sockperf ping-pong 64 B, $route route: $(grep -o 'Latency is [0-9.]* usec' /tmp/pp.$route) (rxe +$(($(rxe_pkts) - r0)) packets)"
	env LD_PRELOAD=$PRELOAD GSOCK_TRANSPORT=$route timeout 60 sockperf tp --tcp -i $IP -p 7100 -t 3 -m 65000 >/tmp/tp.$route 2>&1
	echo "# sockperf throughput 65000 B, $route route: $(grep -o 'BandWidth is [0-9.]* MBps' /tmp/tp.$route)"
	kill $sp 2>/dev/null; wait $sp
done
grep -q "Latency is" /tmp/pp.rsocket
ok $? "sockperf ping-pong over the rsocket route"
grep -q "Latency is" /tmp/pp.rsocket || sed 's/^/# /' /tmp/pp.rsocket | tail -15
grep -q "BandWidth is" /tmp/tp.rsocket
ok $? "sockperf throughput over the rsocket route"

# iperf3 (select) over rsocket
env LD_PRELOAD=$PRELOAD GSOCK_TRANSPORT=rsocket timeout 60 iperf3 -s -B $IP -p 7200 -1 >/dev/null 2>&1 &
ip3=$!
sleep 1
r0=$(rxe_pkts)
env LD_PRELOAD=$PRELOAD GSOCK_TRANSPORT=rsocket timeout 60 iperf3 -c $IP -p 7200 -t 2 >/tmp/ip.out 2>&1
rc=$?
reap $ip3 30
echo "# iperf3: $(grep receiver /tmp/ip.out) (rxe +$(($(rxe_pkts) - r0)) packets)"
[ $rc -eq 0 ] && [ $(($(rxe_pkts) - r0)) -gt 1000 ]
ok $? "iperf3 over the rsocket route"

# sockperf's single-socket server mode: a blocking accept, then blocking
# recvfrom (the preload waits for it; rsocket itself is never left blocking).
env LD_PRELOAD=$PRELOAD GSOCK_TRANSPORT=rsocket timeout 60 sockperf sr --tcp -i $IP -p 7110 >/dev/null 2>&1 &
sp=$!
sleep 1
r0=$(rxe_pkts)
env LD_PRELOAD=$PRELOAD GSOCK_TRANSPORT=rsocket timeout 30 sockperf pp --tcp -i $IP -p 7110 -t 2 -m 64 >/tmp/pp.block 2>&1
echo "# sockperf ping-pong 64 B, blocking server: $(grep -o 'Latency is [0-9.]* usec' /tmp/pp.block) (rxe +$(($(rxe_pkts) - r0)) packets)"
kill $sp 2>/dev/null; wait $sp
grep -q "Latency is" /tmp/pp.block
ok $? "sockperf with a blocking single-socket server over the rsocket route"

# redis (epoll) over rsocket, with redis-cli and redis-benchmark
env LD_PRELOAD=$PRELOAD GSOCK_TRANSPORT=rsocket timeout 120 redis-server --bind $IP --port 6400 \
	--save '' --appendonly no --protected-mode no >/tmp/redis.log 2>&1 &
rd=$!
sleep 2
r0=$(rxe_pkts) t0=$(tcp_segs)
RC="env LD_PRELOAD=$PRELOAD GSOCK_TRANSPORT=rsocket timeout 30 redis-cli -h $IP -p 6400"
$RC set gsock-key "over rdma" >/dev/null
[ "$($RC get gsock-key)" = "over rdma" ]
ok $? "redis-cli set then get through a preloaded redis-server, both on rsocket"
env LD_PRELOAD=$PRELOAD GSOCK_TRANSPORT=rsocket timeout 60 redis-benchmark -h $IP -p 6400 -t set,get -n 5000 -c 8 -q >/tmp/rb.out 2>&1
RXE=$(($(rxe_pkts) - r0)) TCP=$(($(tcp_segs) - t0))
tr '\r' '\n' </tmp/rb.out | grep -E 'SET|GET' | tail -2 | sed 's/^/# redis-benchmark: /'
echo "# rxe packets sent +$RXE, TCP segments sent +$TCP"
grep -q "GET: .*requests per second" /tmp/rb.out && [ "$RXE" -gt 1000 ] && [ "$TCP" -lt 50 ]
ok $? "redis-benchmark (8 connections, epoll on both ends) over rsocket, not TCP"
[ "$(timeout 10 redis-cli -h $IP -p 6400 get gsock-key)" = "over rdma" ]
ok $? "a plain redis-cli reaches the same redis over TCP"
kill $rd 2>/dev/null; wait $rd

# nginx (single process, epoll) serving a file to curl, both preloaded
mkdir -p /tmp/www /tmp/ngx
head -c 3000000 /dev/urandom >/tmp/www/blob
cat >/tmp/ngx.conf <<EOF
daemon off; master_process off; worker_processes 1;
error_log /tmp/ngx/error.log; pid /tmp/ngx/nginx.pid;
events { worker_connections 64; }
http { access_log off; client_body_temp_path /tmp/ngx; proxy_temp_path /tmp/ngx;
       fastcgi_temp_path /tmp/ngx; uwsgi_temp_path /tmp/ngx; scgi_temp_path /tmp/ngx;
       server { listen $IP:8080; root /tmp/www; } }
EOF
env LD_PRELOAD=$PRELOAD GSOCK_TRANSPORT=rsocket timeout 120 nginx -c /tmp/ngx.conf -p /tmp/ngx >/tmp/ngx.out 2>&1 &
ng=$!
sleep 2
r0=$(rxe_pkts)
env LD_PRELOAD=$PRELOAD GSOCK_TRANSPORT=rsocket timeout 30 curl -sS -o /tmp/got http://$IP:8080/blob 2>/tmp/curl.err
rc=$?
echo "# curl: status $rc, rxe +$(($(rxe_pkts) - r0)) packets"
[ $rc -eq 0 ] && cmp -s /tmp/www/blob /tmp/got && [ $(($(rxe_pkts) - r0)) -gt 1000 ]
ok $? "curl fetches 3 MB intact from nginx, both preloaded, over rsocket"
cat /tmp/curl.err /tmp/ngx/error.log /tmp/ngx.out 2>/dev/null | tail -5 | sed 's/^/# /'
timeout 30 curl -sS -o /tmp/got2 http://$IP:8080/blob && cmp -s /tmp/www/blob /tmp/got2
ok $? "a plain curl gets the same file from the same nginx over TCP"
kill $ng 2>/dev/null; wait $ng

# A server killed mid-stream: the client gets an error, no hang. The
# server itself is killed, not the timeout(1) that runs it (SIGKILL on
# timeout leaves its child running).
env LD_PRELOAD=$PRELOAD GSOCK_TRANSPORT=rsocket timeout 60 nc -l $IP 7300 >/dev/null 2>&1 &
srv=$!
sleep 1
( sleep 2; pkill -9 -f "nc -l $IP 7300" ) &
killer=$!
t0=$(date +%s)
head -c 20000000000 /dev/zero | env LD_PRELOAD=$PRELOAD GSOCK_TRANSPORT=rsocket timeout 30 nc -N $IP 7300 >/dev/null 2>/tmp/kill.err
rc=$?
echo "# the client ended $(($(date +%s) - t0)) s after it started (the server was killed at 2 s)"
wait $killer
reap $srv 30
sed 's/^/# client: /' /tmp/kill.err
# nc itself reports no error (it exits 0 over the kernel too): the test
# is that it ends rather than wait out its timeout (124), which it did
# in half the runs while librdmacm's rpoll could spin (rs.c, pl_rs_rpoll).
[ $rc -ne 124 ]
ok $? "server killed mid-stream: a preloaded nc writer ends (status $rc), no hang"
# The same with a client that reports errors: loadgen echoing 1 MiB
# requests through a preloaded cpu-echo-server that is killed.
env LD_PRELOAD=$PRELOAD GSOCK_TRANSPORT=rsocket cpu-echo-server -H $IP -p 7310 -t 1 >/dev/null 2>&1 &
ce=$!
sleep 1
( sleep 2; kill -9 $ce ) &
killer=$!
env LD_PRELOAD=$PRELOAD GSOCK_TRANSPORT=rsocket timeout 30 loadgen -c 1 -s 1048576 -d 6 -w 0.5 $IP 7310 >/tmp/lg.kill 2>&1
rc=$?
wait $killer
reap $ce 30
echo "# loadgen: $(cat /tmp/lg.kill)"
[ $rc -eq 1 ] && grep -q "errors=1" /tmp/lg.kill
ok $? "server killed mid-stream: a preloaded loadgen gets the error (status $rc), no hang"

# The same, step by step: the peer (it never reads) is killed while this
# end waits to send; the wait ends, a send fails, and shutdown and close
# return at once, as over the kernel. rsocket still counts the connection
# connected until it takes the CM event, and its shutdown then waited for
# its sends to complete: for ever under Soft-RoCE (netcat above hung so).
# Then a peer that closes in order: EOF, and shutdown is no error; and
# one alive that reads nothing: shutdown does not wait for it.
env TORTURE_IP=$IP LD_PRELOAD=$PRELOAD GSOCK_TRANSPORT=rsocket timeout 40 preload-torture peer-killed >/tmp/pk.rs 2>&1
rc=$?
env TORTURE_IP=$IP LD_PRELOAD=$PRELOAD GSOCK_TRANSPORT=os timeout 40 preload-torture peer-killed >/tmp/pk.os 2>&1
sed 's/^/# rsocket: /' /tmp/pk.rs; sed 's/^/# kernel route: /' /tmp/pk.os
[ $rc -eq 0 ] && grep -q "shutdown returned at once" /tmp/pk.rs && cmp -s /tmp/pk.rs /tmp/pk.os
ok $? "peer killed while a preloaded client waits to send: the send fails, shutdown and close return at once; a peer that closes in order: EOF, shutdown no error; one that reads nothing: shutdown at once (as over the kernel)"


# A client killed mid-stream: the server sees the end and exits.
env LD_PRELOAD=$PRELOAD GSOCK_TRANSPORT=rsocket timeout 20 nc -d -l $IP 7301 >/dev/null 2>&1 &
srv=$!
sleep 1
head -c 2000000000 /dev/zero | env LD_PRELOAD=$PRELOAD GSOCK_TRANSPORT=rsocket timeout 60 nc $IP 7301 >/dev/null 2>&1 &
sleep 2
pkill -9 -f "nc $IP 7301"
reap $srv 30
rc=$?
ok $rc "client killed mid-stream: the rsocket server sees the end, no hang"
pkill -f "nc $IP 7301"

# fork: a forking server (socat, fork) on the rsocket route. A plain TCP
# client lands on the kernel half and its child serves it; an rsocket
# client's connection was accepted by the parent, and the child may not
# use it: it gets EOPNOTSUPP (said on stderr), the client sees the end,
# and the parent goes on serving.
env LD_PRELOAD=$PRELOAD GSOCK_TRANSPORT=rsocket timeout 60 socat TCP-LISTEN:7400,bind=$IP,fork,reuseaddr SYSTEM:cat >/dev/null 2>/tmp/socat.err &
so=$!
sleep 1
[ "$(echo over-tcp | timeout 10 nc -N $IP 7400)" = over-tcp ]
ok $? "forking server on the rsocket route: a plain TCP client is served by the child"
echo over-rdma | env LD_PRELOAD=$PRELOAD GSOCK_TRANSPORT=rsocket timeout 10 nc -N $IP 7400 >/tmp/fork.out 2>&1
rc=$?
grep -q "rsockets do not survive fork" /tmp/socat.err && [ $rc -ne 124 ]
ok $? "an rsocket accepted before fork: the child is told EOPNOTSUPP, the client ends (status $rc)"
sed 's/^/# socat: /' /tmp/socat.err | tail -3
[ "$(echo again | timeout 10 nc -N $IP 7400)" = again ] && kill -0 $so
ok $? "and the parent goes on serving"
kill $so 2>/dev/null; wait $so 2>/dev/null

# Fork-safe mode (RDMAV_FORK_SAFE=1 on both ends, as rsocket documents):
# connections start on TCP and move to rsocket at their first data call,
# made by the forking server's child. A plain peer on either side stays
# on TCP with its bytes intact.
FS="RDMAV_FORK_SAFE=1 GSOCK_TRANSPORT=rsocket GSOCK_LOG=info"
env LD_PRELOAD=$PRELOAD $FS timeout 120 socat TCP-LISTEN:7401,bind=$IP,fork,reuseaddr SYSTEM:cat >/dev/null 2>/tmp/socatfs.err &
so=$!
sleep 1
head -c 1000000 /dev/urandom >/tmp/in
r0=$(rxe_pkts) t0=$(tcp_segs)
env LD_PRELOAD=$PRELOAD $FS timeout 30 nc -N $IP 7401 </tmp/in >/tmp/out 2>/tmp/ncfs.err
rc=$?
RXE=$(($(rxe_pkts) - r0)) TCP=$(($(tcp_segs) - t0))
echo "# rxe packets sent +$RXE, TCP segments sent +$TCP"
sed 's/^/# nc: /' /tmp/ncfs.err | tail -3
[ $rc -eq 0 ] && cmp -s /tmp/in /tmp/out
ok $? "fork-safe mode: preloaded nc through a forking socat (child echoes): 1 MB intact"
grep -q "moved to rsocket" /tmp/ncfs.err && grep -q "moved to rsocket" /tmp/socatfs.err &&
	[ "$RXE" -gt 500 ] && [ "$TCP" -lt 100 ]
ok $? "and both ends moved to rsocket: rxe carried the megabyte, TCP only the start"
for i in 1 2 3; do
	[ "$(echo "again $i" | env LD_PRELOAD=$PRELOAD $FS timeout 10 nc -N $IP 7401)" = "again $i" ] || break
done
[ $i -eq 3 ] && [ "$(grep -c "moved to rsocket" /tmp/socatfs.err)" -ge 4 ]
ok $? "three more connections, each moved by its own child"
# A fork-safe client that connects, then waits 3 s before its first data
# call: the server's child gave up on it after 2 s; the client's late
# answer is out of band and dropped, neither stream gets a stray byte.
[ "$(env LD_PRELOAD=$PRELOAD $FS timeout 20 bash -c "exec 3<>/dev/tcp/$IP/7401; sleep 3; echo late-client >&3; read -r l <&3; echo \$l" 2>/tmp/late.err)" = late-client ]
ok $? "a fork-safe client whose first data call comes after the server gave up: stays on TCP, bytes intact"
sed 's/^/# bash: /' /tmp/late.err | tail -2
t0=$(tcp_segs)
[ "$(echo plain-client | timeout 10 nc -N $IP 7401)" = plain-client ]
ok $? "a plain nc against the fork-safe server: served over TCP, bytes untouched"
[ "$(echo rsocket-client | env LD_PRELOAD=$PRELOAD GSOCK_TRANSPORT=rsocket timeout 10 nc -N $IP 7401)" = rsocket-client ]
ok $? "a preloaded nc not in fork-safe mode: its rsocket connect is refused, TCP serves it"
kill $so 2>/dev/null; wait $so 2>/dev/null
sed 's/^/# socat: /' /tmp/socatfs.err | grep -v "moved to rsocket" | tail -4
timeout 30 socat TCP-LISTEN:7402,bind=$IP,reuseaddr SYSTEM:cat >/dev/null 2>&1 &
so=$!
sleep 1
[ "$(echo to-plain-server | env LD_PRELOAD=$PRELOAD $FS timeout 20 nc -N $IP 7402 2>/tmp/ncfs.err)" = to-plain-server ]
ok $? "a fork-safe client against a plain server: it stays on TCP, bytes untouched"
sed 's/^/# nc: /' /tmp/ncfs.err | tail -2
kill $so 2>/dev/null; wait $so 2>/dev/null

# gsockd with the rsocket transport: the GPU echo server (host backend)
# is reached over rsocket by preloaded clients and over TCP by plain ones,
# at the same port.
export GSOCK_CONTROL=/tmp/gsockd.sock
printf 'transport = "rsocket"\npreload_library = "%s"\n' $PRELOAD >/tmp/gsockd.conf
# RDMAV_FORK_SAFE=1 in its environment must not turn gsockd's loop into
# the fork-safe mode's waits: it still listens on rsocket (test below).
RDMAV_FORK_SAFE=1 GSOCK_LOG=info gsockd --conf /tmp/gsockd.conf 2>/tmp/gsockd.log &
gd=$!
sleep 1
gsock-echo-server-host -l $IP:7001 -b 4 >/tmp/echo.out 2>&1 &
es=$!
sleep 2
grep -q "listening on rsocket and on the kernel" /tmp/gsockd.log
ok $? "gsockd (transport rsocket) listens for the GPU server on rsocket and on the kernel"
r0=$(rxe_pkts) t0=$(tcp_segs)
[ "$(echo hello-over-rdma | env LD_PRELOAD=$PRELOAD GSOCK_TRANSPORT=rsocket timeout 10 nc -N $IP 7001)" = hello-over-rdma ]
ok $? "a preloaded nc gets its echo from the GPU server over rsocket"
# sockperf's ping-pong needs a sockperf server (it answers warm-up
# messages differently), so the round trips here come from bench/loadgen.
env LD_PRELOAD=$PRELOAD GSOCK_TRANSPORT=rsocket timeout 30 loadgen -c 1 -s 64 -d 2 -w 0.5 $IP 7001 >/tmp/lg.rs 2>&1
lrc=$?
RXE=$(($(rxe_pkts) - r0)) TCP=$(($(tcp_segs) - t0))
timeout 30 loadgen -c 1 -s 64 -d 2 -w 0.5 $IP 7001 >/tmp/lg.tcp 2>&1
echo "# loadgen 64 B round trips to the GPU echo server, rsocket: $(cat /tmp/lg.rs)"
echo "# same, plain TCP: $(cat /tmp/lg.tcp)"
echo "# rxe packets sent +$RXE, TCP segments sent +$TCP during the rsocket run"
[ $lrc -eq 0 ] && [ "$RXE" -gt 500 ] && [ "$TCP" -lt 20 ]
ok $? "preloaded loadgen round trips with the GPU echo server: bytes checked, rxe carried them, not TCP"
t0=$(tcp_segs)
[ "$(echo hello-over-tcp | timeout 10 nc -N $IP 7001)" = hello-over-tcp ] && [ $(($(tcp_segs) - t0)) -gt 2 ]
ok $? "a plain nc gets its echo from the same port over TCP"
# GPU clients: gsockd connects for them without blocking its loop, over
# rsocket where the peer listens there, else over the kernel.
env LD_PRELOAD=$PRELOAD GSOCK_TRANSPORT=rsocket timeout 60 cpu-echo-server -H $IP -p 7502 -t 1 >/dev/null 2>&1 &
rsrv=$!
timeout 60 cpu-echo-server -H $IP -p 7503 -t 1 >/dev/null 2>&1 &
psrv=$!
sleep 1
# A peer that never answers (dummy0 drops everything): its connect stays
# in flight for the whole test, in gsockd's loop.
timeout 60 gsock-echo-client-host -i 1 192.0.2.99:7009 >/dev/null 2>&1 &
stuck=$!
sleep 1
r0=$(rxe_pkts) t0=$(tcp_segs)
timeout 20 gsock-echo-client-host -b 2 -i 200 $IP:7502 >/tmp/gc.rs 2>&1
grc=$?
RXE=$(($(rxe_pkts) - r0)) TCP=$(($(tcp_segs) - t0))
echo "# GPU client to a preloaded rsocket server: rxe packets sent +$RXE, TCP segments sent +$TCP; $(tail -1 /tmp/gc.rs)"
[ $grc -eq 0 ] && [ "$RXE" -gt 500 ] && [ "$TCP" -lt 50 ]
ok $? "GPU client (gconnect via gsockd, transport rsocket) to a preloaded server: echoes checked, over rxe"
t0=$(tcp_segs)
timeout 20 gsock-echo-client-host -i 200 $IP:7503 >/tmp/gc.tcp 2>&1 && [ $(($(tcp_segs) - t0)) -gt 100 ] &&
	grep -q "rsocket connect failed" /tmp/gsockd.log
ok $? "GPU client to a plain server: rsocket refused, the kernel connects instead, echoes checked"
kill -0 $stuck 2>/dev/null
ok $? "both while another GPU client's connect to a silent peer is still in flight (gsockd's loop never waits on it)"
kill $stuck $rsrv $psrv 2>/dev/null
wait $stuck $rsrv $psrv 2>/dev/null
kill $es $gd 2>/dev/null
wait $es $gd 2>/dev/null
sed 's/^/# gsockd: /' /tmp/gsockd.log | tail -5

# More descriptors than 65,536 under the preload (the workplace's machines
# cap open files at 20,000; the guest is root and may raise it): 70,000
# sockets at once and a connection above descriptor 65,536, plus select
# and poll on high descriptors, the same with the preload as without.
(
	ulimit -n 100000 || exit 1
	timeout 120 preload-torture manyfds select >/tmp/fds.plain 2>&1
	env LD_PRELOAD=$PRELOAD timeout 120 preload-torture manyfds select >/tmp/fds.pre 2>&1
)
sed 's/^/# without: /' /tmp/fds.plain; sed 's/^/# preloaded: /' /tmp/fds.pre
grep -q '^manyfds: 70000 sockets open at once; a connection above descriptor 65536 carried bytes$' /tmp/fds.pre &&
	cmp -s /tmp/fds.plain /tmp/fds.pre
ok $? "preloaded: 70,000 sockets at once, a connection above descriptor 65,536 carries bytes, select and poll on high descriptors: as without the preload"

# exec with an rsocket connection open: refused (EOPNOTSUPP, said on
# stderr) instead of handing the new program a socket that is not
# connected; with FD_CLOEXEC set it goes on. On the kernel route both go on.
env TORTURE_IP=$IP LD_PRELOAD=$PRELOAD GSOCK_TRANSPORT=rsocket timeout 60 preload-torture exec-rs >/tmp/exec.rs 2>/tmp/exec.err
sed 's/^/# rsocket: /' /tmp/exec.rs /tmp/exec.err
printf '%s\n' "exec-rs: a vfork child: exec went on; the descriptor is open" \
	"exec-rs: the connection open: exec refused (Operation not supported)" \
	"exec-rs: with FD_CLOEXEC: exec went on; the descriptor is closed" | cmp -s - /tmp/exec.rs &&
	grep -q "exec refused: descriptor [0-9]* is an rsocket connection" /tmp/exec.err
ok $? "exec with an rsocket connection open is refused with EOPNOTSUPP and the reason; with FD_CLOEXEC it goes on; a vfork child's goes on"
env TORTURE_IP=$IP LD_PRELOAD=$PRELOAD GSOCK_TRANSPORT=os timeout 60 preload-torture exec-rs >/tmp/exec.os 2>&1
sed 's/^/# kernel route: /' /tmp/exec.os
printf '%s\n' "exec-rs: a vfork child: exec went on; the descriptor is open" \
	"exec-rs: the connection open: exec went on; the descriptor is open" | cmp -s - /tmp/exec.os
ok $? "on the kernel route the same exec goes on and the new program has the connection"
echo "1..$n"
exit $fail
