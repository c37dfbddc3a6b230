#!/bin/sh
# gsockd's configuration and command line: the shipped file is valid;
# mistakes name the file, line and key and stop gsockd with EX_CONFIG;
# a second gsockd cannot take a live control socket; the socket is 0600.
. "${GSOCK_SRC:-$(dirname "$0")/..}/t/lib.sh"
time_limit 60
plan 16

"$GSOCKD" --check-conf --conf "$GSOCK_SRC/conf/gsock.conf" >/dev/null 2>"$TMP/err"
ok $? "the shipped conf/gsock.conf is valid"

printf 'busy_poll_us = 10\nno_such_key = 3\n' >"$TMP/a.conf"
"$GSOCKD" --check-conf --conf "$TMP/a.conf" 2>"$TMP/err"
is $? 78 "an unknown key exits with EX_CONFIG"
grep -q "a.conf:2: no such option 'no_such_key'" "$TMP/err"
ok $? "the error names the file, line 2 and the key"

printf '\n\nidle_sleep_us = 0\n' >"$TMP/b.conf"
"$GSOCKD" --check-conf --conf "$TMP/b.conf" 2>"$TMP/err"
grep -q "b.conf:3: idle_sleep_us: 0 is out of range" "$TMP/err"
ok $? "an out-of-range value names line 3 and the key"

printf 'log_level = "loud"\n' >"$TMP/c.conf"
"$GSOCKD" --check-conf --conf "$TMP/c.conf" 2>"$TMP/err"
grep -q 'c.conf:1: log_level: "loud" is not one of' "$TMP/err"
ok $? "a bad log level is named with its choices"

printf 'transport = "infiniband"\n' >"$TMP/d.conf"
"$GSOCKD" --check-conf --conf "$TMP/d.conf" 2>"$TMP/err"
grep -q 'd.conf:1: transport: "infiniband" is not one of tcp, rsocket' "$TMP/err"
ok $? "a bad transport is named with its choices"

printf 'answer_nap = "sometimes"\n' >"$TMP/n.conf"
"$GSOCKD" --check-conf --conf "$TMP/n.conf" 2>"$TMP/err"
grep -q 'n.conf:1: answer_nap: "sometimes" is not one of learn, off' "$TMP/err"
ok $? "a bad answer_nap is named with its choices"

printf 'transport = "rsocket"\npreload_library = "%s/none.so"\n' "$TMP" >"$TMP/e.conf"
"$GSOCKD" --conf "$TMP/e.conf" --control "$TMP/e.sock" 2>"$TMP/err"
is $? 78 "transport rsocket without the preload library exits with EX_CONFIG"
grep -q "transport rsocket needs $TMP/none.so: No such file" "$TMP/err"
ok $? "and says which file it needs"

: >"$TMP/empty.so"
printf 'transport = "rsocket"\npreload_library = "%s/empty.so"\n' "$TMP" >"$TMP/f.conf"
"$GSOCKD" --conf "$TMP/f.conf" --control "$TMP/f.sock" 2>"$TMP/err"
is $? 78 "transport rsocket with a library that does not load exits with EX_CONFIG"
grep -q "transport rsocket: $TMP/empty.so did not load" "$TMP/err"
ok $? "and says so"

"$GSOCKD" --check-conf --conf "$TMP/missing.conf" 2>"$TMP/err"
is $? 78 "a missing --conf file is an error"

"$GSOCKD" --bogus-option 2>/dev/null
is $? 64 "an unknown option exits with EX_USAGE"

start_gsockd
is "$(stat -c %a "$GSOCK_CONTROL")" 600 "the control socket is mode 0600"
"$GSOCKD" --conf "$TMP/gsock.conf" --control "$GSOCK_CONTROL" 2>"$TMP/err2"
grep -q "another gsockd is running at $GSOCK_CONTROL" "$TMP/err2"
ok $? "a second gsockd refuses a live control socket"
kill -0 "$GSOCKD_PID"
ok $? "the first gsockd still runs"
finish
