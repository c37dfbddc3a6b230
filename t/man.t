#!/bin/sh
# The man pages: mandoc's lint finds nothing to warn about in any of them,
# and they name what the code has: every gsockd option (from its --help),
# every gsock.conf key (from the shipped file), every g-call (from
# gsock.cuh) and every libgsock function (from gsock.h).
. "${GSOCK_SRC:-$(dirname "$0")/..}/t/lib.sh"
time_limit 60
command -v mandoc >/dev/null 2>&1 || skip_all "mandoc is not installed (scripts/setup installs it)"
M=$GSOCK_SRC/man
pages="gsock.7 gsockd.8 gsock.conf.5 gsock-calls.3 gsock-server.3 libgsock.3 gsock-preload.8 gsock-run.1 gsock-stat.1"
plan 15
bad=""
for p in $pages; do
	out=$(mandoc -T lint -W warning "$M/$p" 2>&1)
	[ -z "$out" ] || bad="$bad $p: $out"
done
is "$bad" "" "mandoc -T lint -W warning is quiet on all $(echo $pages | wc -w) pages"

text() { mandoc -T ascii "$M/$1" | col -b; }
# missing PAGE WORD...: the words PAGE's text lacks (whole words)
missing() {
	page=$1
	shift
	text "$page" >"$TMP/page.txt"
	for w in "$@"; do grep -qw -- "$w" "$TMP/page.txt" || printf ' %s' "$w"; done
}
opts=$("$GSOCKD" --help 2>&1 | grep -o -- '--[a-z-]*' | sort -u)
[ -n "$opts" ]
ok $? "gsockd --help lists options ($(echo $opts | wc -w))"
is "$(missing gsockd.8 $opts)" "" "gsockd(8) names every option of gsockd --help"

keys=$(sed -n 's/^\([a-z_]*\) *=.*/\1/p' "$GSOCK_SRC/conf/gsock.conf" | sort -u)
[ "$(echo $keys | wc -w)" -ge 15 ]
ok $? "conf/gsock.conf has its keys ($(echo $keys | wc -w))"
is "$(missing gsock.conf.5 $keys)" "" "gsock.conf(5) names every key of conf/gsock.conf"

calls=$(sed -n 's/^GSOCK_DEVICE [a-z ]*[ *]\(g[a-z_]*\)(.*/\1/p' "$GSOCK_SRC/devlib/gsock.cuh" | grep -v '^gs_' | sort -u)
[ "$(echo $calls | wc -w)" -ge 10 ]
ok $? "gsock.cuh declares the g-calls ($(echo $calls | tr '\n' ' '))"
is "$(missing gsock-calls.3 $calls)" "" "gsock-calls(3) documents every g-call"

funcs=$(grep -o 'gsock_[a-z_]*(' "$GSOCK_SRC/devlib/gsock.h" | tr -d '(' | sort -u)
[ "$(echo $funcs | wc -w)" -ge 8 ]
ok $? "gsock.h declares libgsock's functions ($(echo $funcs | wc -w))"
is "$(missing libgsock.3 $funcs)" "" "libgsock(3) documents every function of gsock.h"

srv=$( (sed -n 's/^GSOCK_\(DEVICE\|HD\) [a-z0-9_ ]*[ *]\(gsrv_[a-z_]*\)(.*/\2/p' "$GSOCK_SRC/devlib/gsock_server.cuh" "$GSOCK_SRC/devlib/gsock_pipe.cuh" "$GSOCK_SRC/devlib/gsock_http.cuh" "$GSOCK_SRC/devlib/gsock_turn.cuh"
	sed -n 's/^static inline [a-z0-9_ ]*[ *]\(gsrv_[a-z_]*\)(.*/\1/p' "$GSOCK_SRC/devlib/gsock_turn.cuh"
	grep -o 'gsrv_[a-z_]*(' "$GSOCK_SRC/devlib/gsock_server.h" | tr -d '(') | sort -u)
[ "$(echo $srv | wc -w)" -ge 15 ]
ok $? "gsock_server.cuh, gsock_turn.cuh and gsock_server.h declare the server layer ($(echo $srv | wc -w) calls)"
is "$(missing gsock-server.3 $srv)" "" "gsock-server(3) documents every call of the server layer"

# No example program calls an internal: every gs_ name the apps use is
# in a manual page.
used=$(cat "$GSOCK_SRC"/apps/*/*.c "$GSOCK_SRC"/apps/*/*.cu* "$GSOCK_SRC"/apps/*/*.h 2>/dev/null |
	grep -o '\bgs_[a-z0-9_]*(' | tr -d '(' | sort -u)
undoc=""
for f in $used; do
	cat "$GSOCK_SRC"/man/*.[1-8] | grep -q "$f\b" || undoc="$undoc $f"
done
is "$undoc" "" "every device primitive the example apps use is documented ($(echo $used | wc -w) of them)"

# Every page the others point to exists.
refs=$(for p in $pages; do text "$p"; done | grep -o '\b\(gsock[a-z.-]*\|libgsock\|gsockd\)([0-9])' | sort -u)
lost=""
for r in $refs; do
	name=${r%(*} sec=${r#*(}
	sec=${sec%)}
	[ -f "$M/$name.$sec" ] || lost="$lost $r"
done
is "$lost" "" "every gsock page a page refers to exists ($(echo $refs | wc -w) names)"
runhelp=$("$GSOCK_BUILD/preload/gsock-run" --help 2>&1 | grep -o -- '--[a-z-]*' | sort -u)
is "$(missing gsock-run.1 $runhelp)" "" "gsock-run(1) names every option of gsock-run --help"
stathelp=$("$GSOCK_BUILD/bridge/gsock-stat" --help 2>&1 | grep -o -- '--[a-z-]*' | sort -u)
is "$(missing gsock-stat.1 $stathelp)" "" "gsock-stat(1) names every option of gsock-stat --help"
finish
