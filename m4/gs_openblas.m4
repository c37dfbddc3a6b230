# serial 1
# GS_CHECK_OPENBLAS: OpenBLAS, for the CPU-only matrix product server.
#
# --with-openblas (default guess): optional; without it mm-pserver is not
# built and configure says so. Substitutes BLAS_LIBS; AM_CONDITIONAL
# HAVE_OPENBLAS.
AC_DEFUN([GS_CHECK_OPENBLAS], [
AC_ARG_WITH([openblas],
	[AS_HELP_STRING([--with-openblas], [build the CPU-only matrix product server with OpenBLAS (default: guess)])],
	[], [with_openblas=guess])
gs_openblas_happy=no
AS_IF([test "x$with_openblas" != xno], [
	AC_CHECK_HEADER([cblas.h],
		[AC_CHECK_LIB([openblas], [cblas_sgemm],
			[gs_openblas_happy=yes; BLAS_LIBS="-lopenblas"])])
	AS_IF([test "x$gs_openblas_happy" != xyes], [
		AS_IF([test "x$with_openblas" = xguess],
			[AC_MSG_WARN([OpenBLAS not found: mm-pserver will not be built (install libopenblas-dev)])],
			[AC_MSG_ERROR([--with-openblas was given but cblas.h or libopenblas was not found])])])
])
AC_SUBST([BLAS_LIBS])
AM_CONDITIONAL([HAVE_OPENBLAS], [test "x$gs_openblas_happy" = xyes])
])
