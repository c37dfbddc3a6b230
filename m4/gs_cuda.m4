# serial 3
# GS_CHECK_CUDA: find the CUDA toolkit, after openucx/ucx config/m4/cuda.m4.
#
# --with-cuda[=DIR] (default guess): host code links libcudart; the stub
# directory is on the link path so a machine without a GPU driver builds.
# Defines HAVE_CUDA (host runtime can be built), HAVE_NVCC (device code
# can be compiled) and HAVE_CUBLAS (cuBLAS, for programs that capture it
# in CUDA graphs), substitutes CUDA_CPPFLAGS, CUDA_LDFLAGS, CUDA_LIBS,
# CUBLAS_LIBS, NVCC and NVCC_GENCODE.
AC_DEFUN([GS_CHECK_CUDA], [
AC_ARG_WITH([cuda],
	[AS_HELP_STRING([--with-cuda@<:@=DIR@:>@],
		[build the cuda backend with the CUDA toolkit in DIR (default: guess)])],
	[], [with_cuda=guess])
AC_ARG_WITH([nvcc-gencode],
	[AS_HELP_STRING([--with-nvcc-gencode=FLAGS],
		[nvcc code generation flags (default: sm_90 code and compute_90 PTX, for H100/H200)])],
	[NVCC_GENCODE=$withval],
	[NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90 -gencode=arch=compute_90,code=compute_90"])

gs_cuda_happy=no
gs_nvcc_happy=no
gs_cublas_happy=no
AS_IF([test "x$with_cuda" != xno], [
	AS_CASE([$with_cuda],
		[guess|yes], [AC_PATH_PROG([gs_nvcc_path], [nvcc], [], [$PATH:/usr/local/cuda/bin])
			AS_IF([test -n "$gs_nvcc_path"],
				[gs_cuda_dir=`dirname "$gs_nvcc_path"`; gs_cuda_dir=`dirname "$gs_cuda_dir"`],
				[gs_cuda_dir=/usr/local/cuda])],
		[gs_cuda_dir=$with_cuda])
	CUDA_CPPFLAGS="-I$gs_cuda_dir/include"
	CUDA_LDFLAGS="-L$gs_cuda_dir/lib64 -L$gs_cuda_dir/lib64/stubs"
	CUDA_RT_LDFLAGS="-L$gs_cuda_dir/lib64" # for gsock-cuda.pc: no stubs at run time
	gs_save_CPPFLAGS=$CPPFLAGS
	gs_save_LDFLAGS=$LDFLAGS
	CPPFLAGS="$CPPFLAGS $CUDA_CPPFLAGS"
	LDFLAGS="$LDFLAGS $CUDA_LDFLAGS"
	AC_CHECK_HEADER([cuda_runtime_api.h],
		[AC_CHECK_LIB([cudart], [cudaHostRegister],
			[gs_cuda_happy=yes; CUDA_LIBS="-lcudart -lstdc++"])])
	AS_IF([test "x$gs_cuda_happy" = xyes],
		[AC_CHECK_LIB([cublas], [cublasCreate_v2],
			[gs_cublas_happy=yes; CUBLAS_LIBS="-lcublas"], [], [-lcudart])])
	CPPFLAGS=$gs_save_CPPFLAGS
	LDFLAGS=$gs_save_LDFLAGS
	AC_PATH_PROG([NVCC], [nvcc], [], [$gs_cuda_dir/bin:$PATH])
	AS_IF([test "x$gs_cuda_happy" = xyes && test -n "$NVCC"], [gs_nvcc_happy=yes])
	AS_IF([test "x$with_cuda" != xguess && test "x$gs_nvcc_happy" != xyes],
		[AC_MSG_ERROR([--with-cuda was given but no usable CUDA toolkit (cuda_runtime_api.h, libcudart, nvcc) was found in $gs_cuda_dir])])
])
AS_IF([test "x$gs_nvcc_happy" != xyes], [
	AS_IF([test "x$with_cuda" = xguess],
		[AC_MSG_WARN([no CUDA toolkit found: building the host backend only])])
	CUDA_CPPFLAGS= ; CUDA_LDFLAGS= ; CUDA_LIBS= ; CUDA_RT_LDFLAGS= ; CUBLAS_LIBS=
	gs_cublas_happy=no
])
AM_CONDITIONAL([HAVE_CUDA], [test "x$gs_cuda_happy" = xyes])
AM_CONDITIONAL([HAVE_NVCC], [test "x$gs_nvcc_happy" = xyes])
AM_CONDITIONAL([HAVE_CUBLAS], [test "x$gs_cublas_happy" = xyes])
AC_SUBST([CUDA_CPPFLAGS])
AC_SUBST([CUDA_LDFLAGS])
AC_SUBST([CUDA_LIBS])
AC_SUBST([CUBLAS_LIBS])
AC_SUBST([CUDA_RT_LDFLAGS])
AC_SUBST([NVCC_GENCODE])
])
