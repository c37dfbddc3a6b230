# serial 1
# GS_CHECK_RDMACM: librdmacm's rsocket, for the rsocket transport.
#
# --with-rdmacm[=DIR] (default guess): optional; without it gsock builds
# with the tcp and unix transports only. Defines HAVE_RDMACM and
# substitutes RDMACM_CPPFLAGS, RDMACM_LDFLAGS and RDMACM_LIBS.
AC_DEFUN([GS_CHECK_RDMACM], [
AC_ARG_WITH([rdmacm],
	[AS_HELP_STRING([--with-rdmacm@<:@=DIR@:>@],
		[use librdmacm (rsocket) from DIR (default: guess)])],
	[], [with_rdmacm=guess])
gs_rdmacm_happy=no
AS_IF([test "x$with_rdmacm" != xno], [
	AS_CASE([$with_rdmacm],
		[guess|yes], [],
		[RDMACM_CPPFLAGS="-I$with_rdmacm/include"; RDMACM_LDFLAGS="-L$with_rdmacm/lib"])
	gs_save_CPPFLAGS=$CPPFLAGS
	gs_save_LDFLAGS=$LDFLAGS
	CPPFLAGS="$CPPFLAGS $RDMACM_CPPFLAGS"
	LDFLAGS="$LDFLAGS $RDMACM_LDFLAGS"
	AC_CHECK_HEADER([rdma/rsocket.h],
		[AC_CHECK_LIB([rdmacm], [rsocket],
			[gs_rdmacm_happy=yes; RDMACM_LIBS="-lrdmacm"])])
	CPPFLAGS=$gs_save_CPPFLAGS
	LDFLAGS=$gs_save_LDFLAGS
	AS_IF([test "x$gs_rdmacm_happy" != xyes], [
		AS_IF([test "x$with_rdmacm" = xguess],
			[AC_MSG_WARN([librdmacm (rsocket) not found: building without the rsocket transport])],
			[AC_MSG_ERROR([--with-rdmacm was given but rdma/rsocket.h or librdmacm was not found])])
		RDMACM_CPPFLAGS= ; RDMACM_LDFLAGS=
	])
])
AS_IF([test "x$gs_rdmacm_happy" = xyes],
	[AC_DEFINE([HAVE_RDMACM], [1], [Define to 1 if librdmacm (rsocket) is available.])])
AM_CONDITIONAL([HAVE_RDMACM], [test "x$gs_rdmacm_happy" = xyes])
AC_SUBST([RDMACM_CPPFLAGS])
AC_SUBST([RDMACM_LDFLAGS])
AC_SUBST([RDMACM_LIBS])
])
