#!/bin/sh
# A peer that closes makes grecv return 0 once the data is drained; a peer
# that resets makes grecv and gsend return -ECONNRESET; a closed descriptor
# gives -EBADF. Also the g-calls' answers to bad arguments.
. "${GSOCK_SRC:-$(dirname "$0")/..}/t/lib.sh"
need_backend
time_limit 120
plan 19

start_gsockd
start_helper fin-server hello
timeout 20 "$PROBE" recv "127.0.0.1:$HELPER_PORT" >"$TMP/fin" 2>&1
ok $? "probe ran against a closing peer" || sed 's/^/# /' "$TMP/fin"
is "$(probe_value "$TMP/fin" bytes)" 5 "all 5 bytes arrive before EOF"
is "$(probe_value "$TMP/fin" end)" 0 "then grecv returns 0 (EOF)"
is "$(probe_value "$TMP/fin" close)" 0 "gclose returns 0"
is "$(probe_value "$TMP/fin" after-close)" -9 "grecv on the closed descriptor: -EBADF"

start_helper rst-server hello
timeout 20 "$PROBE" recv "127.0.0.1:$HELPER_PORT" >"$TMP/rst" 2>&1
ok $? "probe ran against a resetting peer" || sed 's/^/# /' "$TMP/rst"
is "$(probe_value "$TMP/rst" bytes)" 5 "the 5 bytes sent before the reset arrive"
is "$(probe_value "$TMP/rst" end)" -104 "then grecv returns -ECONNRESET"
is "$(probe_value "$TMP/rst" send)" -104 "and gsend returns -ECONNRESET"

# A port nobody listens on, for connect-refused.
closed=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
timeout 20 "$PROBE" errors "127.0.0.1:$closed" >"$TMP/err" 2>&1
ok $? "the error probe ran"
is "$(probe_value "$TMP/err" send-badfd)" -9 "gsend on an unknown descriptor: -EBADF"
is "$(probe_value "$TMP/err" socket-family)" -97 "gsocket(AF_PACKET): -EAFNOSUPPORT"
is "$(probe_value "$TMP/err" socket-dgram)" -93 "gsocket(SOCK_DGRAM): -EPROTONOSUPPORT"
is "$(probe_value "$TMP/err" recv-unconnected)" -107 "grecv before connect: -ENOTCONN"
is "$(probe_value "$TMP/err" sockopt-unknown)" -92 "gsetsockopt(SO_DEBUG): -ENOPROTOOPT"
is "$(probe_value "$TMP/err" connect-refused)" -111 "gconnect to a closed port: -ECONNREFUSED"
is "$(probe_value "$TMP/err" accept-nb)" -11 "gaccept_nb with nothing pending: -EAGAIN"
is "$(probe_value "$TMP/err" poll-timeout)" 0 "gpoll times out with 0"
is "$(probe_value "$TMP/err" close-again)" -9 "gclose twice: -EBADF"
finish
