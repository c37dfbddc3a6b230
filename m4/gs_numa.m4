# serial 1
# GS_CHECK_NUMA: libnuma, to run gsockd's workers near the GPU.
#
# --with-numa (default guess): optional; without it gsockd places nothing
# and says so in its log. Defines HAVE_LIBNUMA and substitutes NUMA_LIBS.
AC_DEFUN([GS_CHECK_NUMA], [
AC_ARG_WITH([numa],
	[AS_HELP_STRING([--with-numa], [place gsockd's workers with libnuma (default: guess)])],
	[], [with_numa=guess])
gs_numa_happy=no
AS_IF([test "x$with_numa" != xno], [
	AC_CHECK_HEADER([numa.h],
		[AC_CHECK_LIB([numa], [numa_run_on_node],
			[gs_numa_happy=yes; NUMA_LIBS="-lnuma"])])
	AS_IF([test "x$gs_numa_happy" != xyes], [
		AS_IF([test "x$with_numa" = xguess],
			[AC_MSG_WARN([libnuma not found: gsockd will not place its workers (install libnuma-dev)])],
			[AC_MSG_ERROR([--with-numa was given but numa.h or libnuma was not found])])])
])
AS_IF([test "x$gs_numa_happy" = xyes],
	[AC_DEFINE([HAVE_LIBNUMA], [1], [Define to 1 to place workers with libnuma.])])
AC_SUBST([NUMA_LIBS])
])
