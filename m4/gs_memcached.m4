# SPDX-License-Identifier: Apache-2.0
# GS_CHECK_MEMCACHED: libmemcached, the CPU face verification programs'
# memcached client.
#
# --with-libmemcached (default guess): optional; without it the CPU
# servers of face verification (facever-pserver, facever-cserver-cuda)
# and facever-enrol are not built and configure says so. Substitutes
# MEMCACHED_LIBS; AM_CONDITIONAL HAVE_LIBMEMCACHED.
AC_DEFUN([GS_CHECK_MEMCACHED], [
AC_ARG_WITH([libmemcached],
	[AS_HELP_STRING([--with-libmemcached], [build the CPU face verification programs with libmemcached (default: guess)])],
	[], [with_libmemcached=guess])
gs_memcached_happy=no
AS_IF([test "x$with_libmemcached" != xno], [
	AC_CHECK_HEADER([libmemcached/memcached.h],
		[AC_CHECK_LIB([memcached], [memcached_mget],
			[gs_memcached_happy=yes; MEMCACHED_LIBS="-lmemcached"])])
	AS_IF([test "x$gs_memcached_happy" != xyes], [
		AS_IF([test "x$with_libmemcached" = xguess],
			[AC_MSG_WARN([libmemcached not found: facever-pserver, facever-cserver and facever-enrol will not be built (install libmemcached-dev)])],
			[AC_MSG_ERROR([--with-libmemcached was given but libmemcached was not found])])])
])
AC_SUBST([MEMCACHED_LIBS])
AM_CONDITIONAL([HAVE_LIBMEMCACHED], [test "x$gs_memcached_happy" = xyes])
])
