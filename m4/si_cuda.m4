# SI_CUDA: --with-cuda[=DIR] and --with-cuda-arch=LIST.
#   default (check): use CUDA when nvcc is found; otherwise skip the CUDA
#   parts with one clear line.  An explicit --with-cuda that cannot be used
#   is an error.  Sets BUILD_CUDA (conditional), NVCC, CUDA_CFLAGS,
#   CUDA_LIBS, CUDA_GENCODE and si_cuda_summary.
AC_DEFUN([SI_CUDA], [
AC_ARG_WITH([cuda],
  [AS_HELP_STRING([--with-cuda@<:@=DIR@:>@],
    [build the cuda_sm120 backend (default: when nvcc is found)])],
  [], [with_cuda=check])
AC_ARG_WITH([cuda-arch],
  [AS_HELP_STRING([--with-cuda-arch=LIST],
    [comma-separated SM versions for the fatbin (default: 90,120)])],
  [], [with_cuda_arch="90,120"])
AC_ARG_VAR([NVCC], [CUDA compiler])
AC_ARG_VAR([NVCCFLAGS], [extra flags for nvcc])

si_cuda_ok=no
si_cuda_why=""
AS_CASE([$with_cuda],
  [no], [si_cuda_why="disabled by --without-cuda"],
  [yes|check], [AC_PATH_PROG([NVCC], [nvcc], [], [$PATH:/usr/local/cuda/bin])],
  [AC_PATH_PROG([NVCC], [nvcc], [], [$with_cuda/bin])])

AS_IF([test "x$with_cuda" != xno], [
  AS_IF([test -z "$NVCC"], [si_cuda_why="nvcc not found"], [
    si_cuda_home=`AS_DIRNAME(["$NVCC"])`
    si_cuda_home=`AS_DIRNAME(["$si_cuda_home"])`
    CUDA_CFLAGS="-I$si_cuda_home/include"
    si_cuda_libdir="$si_cuda_home/lib64"
    test -d "$si_cuda_libdir" || si_cuda_libdir="$si_cuda_home/lib"
    CUDA_LIBS="-L$si_cuda_libdir -lcudart_static -lrt -lpthread -ldl -lstdc++"
    CUDA_GENCODE=""
    for a in `echo "$with_cuda_arch" | tr ',' ' '`; do
      AS_CASE([$a], [*[[!0-9]]*|''], [AC_MSG_ERROR([--with-cuda-arch: '$a' is not an SM number like 90 or 120])])
      CUDA_GENCODE="$CUDA_GENCODE -gencode arch=compute_$a,code=sm_$a"
    done
    AC_MSG_CHECKING([whether $NVCC compiles for sm_{$with_cuda_arch}])
    cat > conftest.cu <<_SI_EOF
__global__ void k(int *p) { p[[threadIdx.x]] = 1; }
int main(void) { k<<<1, 1>>>(0); return 0; }
_SI_EOF
    AS_IF([$NVCC $CUDA_GENCODE -c conftest.cu -o conftest.o >&AS_MESSAGE_LOG_FD 2>&1],
      [AC_MSG_RESULT([yes]); si_cuda_ok=yes],
      [AC_MSG_RESULT([no]); si_cuda_why="$NVCC cannot compile for sm_{$with_cuda_arch} (see config.log)"])
    rm -f conftest.cu conftest.o
  ])
])

AS_IF([test "x$si_cuda_ok" = xno && test "x$with_cuda" != xno && test "x$with_cuda" != xcheck],
  [AC_MSG_ERROR([--with-cuda was given but CUDA is unusable: $si_cuda_why])])

AS_IF([test "x$si_cuda_ok" = xyes],
  [si_cuda_summary="yes (sm $with_cuda_arch, $NVCC)"],
  [si_cuda_summary="no ($si_cuda_why)"
   AC_MSG_NOTICE([CUDA backend cuda_sm120 will NOT be built: $si_cuda_why])])
AC_SUBST([CUDA_CFLAGS])
AC_SUBST([CUDA_LIBS])
AC_SUBST([CUDA_GENCODE])
AM_CONDITIONAL([BUILD_CUDA], [test "x$si_cuda_ok" = xyes])
])
