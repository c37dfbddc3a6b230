# serial 1
# GS_CHECK_URING: liburing, for gsockd's io_uring data path.
#
# --with-liburing (default guess): optional; without it gsockd moves bytes
# with epoll and readv/sendmsg and says so in its log. Defines
# HAVE_LIBURING and substitutes URING_LIBS.
AC_DEFUN([GS_CHECK_URING], [
AC_ARG_WITH([liburing],
	[AS_HELP_STRING([--with-liburing], [batch gsockd's socket I/O with io_uring (default: guess)])],
	[], [with_liburing=guess])
gs_uring_happy=no
AS_IF([test "x$with_liburing" != xno], [
	AC_CHECK_HEADER([liburing.h],
		[AC_CHECK_LIB([uring], [io_uring_submit_and_wait_timeout],
			[gs_uring_happy=yes; URING_LIBS="-luring"])])
	AS_IF([test "x$gs_uring_happy" != xyes], [
		AS_IF([test "x$with_liburing" = xguess],
			[AC_MSG_WARN([liburing not found: gsockd will use epoll only (install liburing-dev)])],
			[AC_MSG_ERROR([--with-liburing was given but liburing.h or liburing was not found])])])
])
AS_IF([test "x$gs_uring_happy" = xyes],
	[AC_DEFINE([HAVE_LIBURING], [1], [Define to 1 to build gsockd's io_uring data path.])])
AC_SUBST([URING_LIBS])
])
