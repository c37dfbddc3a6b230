#!/bin/sh
# The Debian packages' file lists, fast: this build installed into a
# staging tree laid out as debian/rules lays it out, then debhelper's
# binary steps (dh_install, dh_installdocs, dh_compress, dh_missing
# --fail-missing, dh_shlibdeps, dh_gencontrol, dh_builddeb) make the four .debs, whose contents,
# dependencies and conffiles are checked, and whose gsockd runs from the
# unpacked package. The whole build (dpkg-buildpackage -b -uc -us, which
# compiles everything again) is README's, by hand: too slow for CI.
. "${GSOCK_SRC:-$(dirname "$0")/..}/t/lib.sh"
time_limit 300
for c in dh_install dh_builddeb dpkg-deb dpkg-architecture; do
	command -v $c >/dev/null 2>&1 || skip_all "$c is not installed (scripts/setup installs debhelper)"
done
plan 12
S=$TMP/src
mkdir -p "$S" "$TMP/out"
cp -r "$GSOCK_SRC/debian" "$S/"
MA=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
make -C "$GSOCK_BUILD" install DESTDIR="$S/debian/tmp" prefix=/usr libdir="/usr/lib/$MA" \
	sysconfdir=/etc systemduserunitdir=/usr/lib/systemd/user >"$TMP/install.log" 2>&1
r=$?
ok $r "make install into debian/tmp, laid out as debian/rules does"
[ $r = 0 ] || sed 's/^/#   /' "$TMP/install.log" | tail -10
(
	cd "$S" &&
		dh_install &&
		dh_installdocs &&
		dh_installchangelogs &&
		dh_compress &&
		dh_fixperms &&
		dh_missing --fail-missing &&
		dh_installdeb &&
		dh_shlibdeps -- --ignore-missing-info &&
		dh_gencontrol &&
		dh_md5sums &&
		dh_builddeb --destdir="$TMP/out"
) >"$TMP/dh.log" 2>&1
r=$?
ok $r "debhelper's binary steps, dh_missing --fail-missing included: every installed file is in a package"
[ $r = 0 ] || sed 's/^/#   /' "$TMP/dh.log" | tail -15
for p in gsockd libgsock-dev gsock-preload gsock-examples; do
	set -- "$TMP/out/${p}_"*.deb
	[ -f "$1" ] && eval "deb_$(echo $p | tr - _)=\$1"
done
[ -n "${deb_gsockd:-}" ] && [ -n "${deb_libgsock_dev:-}" ] && [ -n "${deb_gsock_preload:-}" ] && [ -n "${deb_gsock_examples:-}" ]
ok $? "four packages: $(cd "$TMP/out" && echo *.deb)"
# has DEB PATH...: the paths DEB lacks
has() {
	deb=$1
	shift
	dpkg-deb -c "$deb" | awk '{ print $6 }' | sed 's|^\./|/|' >"$TMP/list"
	for f in "$@"; do grep -qx "$f" "$TMP/list" || printf ' %s' "$f"; done
}
is "$(has "$deb_gsockd" /usr/bin/gsockd /usr/bin/gsock-stat /etc/gsock.conf \
	/usr/lib/systemd/user/gsockd.socket /usr/share/man/man8/gsockd.8.gz \
	/usr/share/doc/gsockd/copyright)" "" \
	"gsockd: the daemon, gsock-stat, gsock.conf, the units, its man pages, the copyright"
is "$(has "$deb_libgsock_dev" /usr/include/gsock.cuh /usr/include/gsock.h \
	"/usr/lib/$MA/libgsock-host.a" "/usr/lib/$MA/pkgconfig/gsock-host.pc" \
	/usr/share/man/man3/gsock-calls.3.gz)" "" \
	"libgsock-dev: headers, libgsock, pkg-config files, the programming pages"
is "$(has "$deb_gsock_preload" "/usr/lib/$MA/libgsock-preload.so" /usr/bin/gsock-run \
	/usr/share/man/man8/gsock-preload.8.gz)" "" "gsock-preload: the preload, gsock-run, its page"
is "$(has "$deb_gsock_examples" /usr/bin/gsock-echo-server-host /usr/bin/facever-pserver)" "" \
	"gsock-examples: the example servers"
dpkg-deb -I "$deb_gsockd" conffiles 2>/dev/null | grep -qx /etc/gsock.conf
ok $? "gsock.conf is a conffile"
dep=$(dpkg-deb -f "$deb_gsockd" Depends)
case $dep in *libconfuse2*) r=0 ;; *) r=1 ;; esac
ok $r "gsockd depends on the libraries it links: $dep"
dep=$(dpkg-deb -f "$deb_gsock_examples" Depends)
case $dep in *gsockd*) r=0 ;; *) r=1 ;; esac
ok $r "gsock-examples depends on gsockd: $dep"
mkdir "$TMP/root"
for d in "$TMP/out"/*.deb; do dpkg-deb -x "$d" "$TMP/root"; done
"$TMP/root/usr/bin/gsockd" --check-conf --conf "$TMP/root/etc/gsock.conf" >/dev/null 2>&1
ok $? "the packaged gsockd accepts the packaged gsock.conf"
"$TMP/root/usr/bin/gsock-stat" -s "$TMP/none.sock" 2>/dev/null
is $? 69 "the packaged gsock-stat runs (and finds no gsockd at a made-up path)"
finish
