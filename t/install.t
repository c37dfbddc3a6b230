#!/bin/sh
# make install, used the way an application builder would: install into a
# DESTDIR, then, with nothing but the installed tree and pkg-config, build
# an out-of-tree g-call program (t/install_app.c), run it against the
# installed gsockd and check its bytes; the installed gsock-run loads the
# installed preload and refuses what it must; the man pages are in place.
# cuda: the program is also built with nvcc and gsock-cuda.pc where nvcc
# is found, and run on the cuda backend.
. "${GSOCK_SRC:-$(dirname "$0")/..}/t/lib.sh"
time_limit 300
command -v pkg-config >/dev/null 2>&1 || skip_all "pkg-config is not installed (scripts/setup installs it)"
plan 17
D=$TMP/root
make -C "$GSOCK_BUILD" install DESTDIR="$D" >"$TMP/install.log" 2>&1
r=$?
ok $r "make install DESTDIR=... succeeds"
[ $r = 0 ] || sed 's/^/#   /' "$TMP/install.log" | tail -20
var() { sed -n "s|^$1 = ||p" "$GSOCK_BUILD/Makefile" | head -1; }
prefix=$(var prefix)
# The directories as make install expanded them.
dirs=$(make -s --no-print-directory -C "$GSOCK_BUILD" -f - gs-dirs <<'MK'
include Makefile
gs-dirs:
	@echo "$(bindir) $(libdir) $(includedir) $(sysconfdir) $(mandir) $(systemduserunitdir)"
MK
)
set -- $dirs
bindir=$1 libdir=$2 includedir=$3 sysconfdir=$4 mandir=$5 unitdir=$6
missing=""
for f in "$bindir/gsockd" "$bindir/gsock-run" "$bindir/gsock-stat" "$mandir/man1/gsock-stat.1" "$libdir/libgsock-preload.so" \
	"$libdir/libgsock-host.a" "$libdir/pkgconfig/gsock-host.pc" \
	"$includedir/gsock.h" "$includedir/gsock.cuh" "$includedir/gsock_port.h" \
	"$sysconfdir/gsock.conf" "$mandir/man8/gsockd.8" "$mandir/man5/gsock.conf.5" \
	"$mandir/man3/gsock-calls.3" "$mandir/man7/gsock.7" "$mandir/man1/gsock-run.1" \
	"$unitdir/gsockd.service" "$unitdir/gsockd.socket"; do
	[ -e "$D$f" ] || missing="$missing $f"
done
is "$missing" "" "installed under $prefix: gsockd, gsock-run, gsock-stat, the preload, libgsock, headers, gsock.conf, pkg-config files, man pages, systemd user units"

# Installed into a DESTDIR: the files' prefix moved there.
export PKG_CONFIG_PATH="$D$libdir/pkgconfig"
pc() { pkg-config --define-variable=prefix="$D$prefix" "$@"; }
flags=$(pc --cflags --libs gsock-host 2>"$TMP/pc.err")
ok $? "pkg-config --cflags --libs gsock-host: $flags"
case $flags in *"$GSOCK_SRC"* | *"$GSOCK_BUILD"*) src=1 ;; *) src=0 ;; esac
is $src 0 "its flags point only into the installed tree"
# shellcheck disable=SC2086
${CC:-cc} -o "$TMP/hello" "$GSOCK_SRC/t/install_app.c" $flags 2>"$TMP/cc.err"
r=$?
ok $r "an out-of-tree g-call program builds with pkg-config alone"
[ $r = 0 ] || sed 's/^/#   /' "$TMP/cc.err"

"$D$bindir/gsockd" --check-conf --conf "$D$sysconfdir/gsock.conf" >/dev/null 2>"$TMP/check.err"
ok $? "the installed gsock.conf passes the installed gsockd's --check-conf"
"$D$bindir/gsockd" --conf "$D$sysconfdir/gsock.conf" --workers 2 2>"$TMP/gsockd.log" &
PIDS="$PIDS $!"
for _ in $(seq 200); do [ -S "$GSOCK_CONTROL" ] && break; sleep 0.05; done
start_helper echo-server 127.0.0.1:0
msg="bytes through an installed gsock"
out=$(timeout 60 "$TMP/hello" "$HELPER_PORT" "$msg" 2>&1)
is "$out" "host backend: ${#msg}: $msg" "the program runs against the installed gsockd: the CPU peer echoed its bytes"

# gsock-run, installed: its preload path is the final one, so point it at the DESTDIR copy.
run=$D$bindir/gsock-run
export GSOCK_PRELOAD=$D$libdir/libgsock-preload.so
maps=$("$run" --log warn python3 -c 'print(sum("libgsock-preload" in l for l in open("/proc/self/maps")) > 0)' 2>&1)
is "$maps" "True" "gsock-run loads the preload into the program"
env_seen=$("$run" --transport os --log info --fork-safe -- sh -c 'echo "$GSOCK_TRANSPORT $GSOCK_LOG $RDMAV_FORK_SAFE"' 2>/dev/null | tail -1)
is "$env_seen" "os info 1" "--transport, --log and --fork-safe reach the program's environment"
for t in /bin/true /usr/bin/true; do [ -x $t ] && break; done
cp "$t" "$TMP/suid-true" && chmod u+s "$TMP/suid-true"
"$run" "$TMP/suid-true" 2>"$TMP/err"
is $? 77 "a set-user-ID program is refused (exit 77)"
grep -q "set-user-ID or set-group-ID" "$TMP/err"
ok $? "saying why: $(cat "$TMP/err")"
"$run" --transport ib true 2>"$TMP/err"
is $? 64 "a bad --transport is a usage error: $(cat "$TMP/err")"
"$run" no-such-program-anywhere 2>"$TMP/err"
is $? 127 "a missing program exits 127: $(cat "$TMP/err")"
GSOCK_PRELOAD=$TMP/none.so "$run" true 2>"$TMP/err"
is $? 69 "a missing preload exits 69 naming it: $(cat "$TMP/err")"

# The cuda backend's pkg-config file, where this build has one.
if [ -f "$D$libdir/pkgconfig/gsock-cuda.pc" ] && command -v "${NVCC:-nvcc}" >/dev/null 2>&1; then
	cflags=$(pc --cflags gsock-cuda) libs=$(pc --libs gsock-cuda)
	# shellcheck disable=SC2086
	"${NVCC:-nvcc}" -x cu -o "$TMP/hello-cuda" "$GSOCK_SRC/t/install_app.c" $cflags $libs 2>"$TMP/nvcc.err"
	r=$?
	ok $r "nvcc builds the program with pkg-config gsock-cuda: $cflags $libs"
	[ $r = 0 ] || sed 's/^/#   /' "$TMP/nvcc.err" | tail -10
	if [ "$BACKEND" = cuda ]; then
		out=$(timeout 60 "$TMP/hello-cuda" "$HELPER_PORT" "$msg" 2>&1)
		is "$out" "cuda backend: ${#msg}: $msg" "the cuda build runs against the installed gsockd"
	else
		echo "ok $((tap_n += 1)) # SKIP running the cuda build needs GSOCK_TEST_BACKEND=cuda and a GPU"
	fi
else
	echo "ok $((tap_n += 1)) # SKIP this build has no cuda backend (no gsock-cuda.pc) or no nvcc"
	echo "ok $((tap_n += 1)) # SKIP this build has no cuda backend"
fi
grep -q '^\.TH GSOCKD 8' "$D$mandir/man8/gsockd.8"
ok $? "the installed gsockd(8) is the page"
finish
