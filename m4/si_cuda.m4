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
    [comma-separated SM versions for the fatbin, e.g. 90a or 120 (default: 90a,120; 90a is sm_90 with Hopper's wgmma, which the i8 prefill GEMM uses)])],
  [], [with_cuda_arch="90a,120"])
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
    # Ask nvcc where its own headers and libraries are: a PATH entry may be
    # a symlink or wrapper whose parent has no include/ (the layout differs
    # between the runfile, distro and pip installs).
    printf '__global__ void k(void) {}\n' > conftest.cu
    si_cuda_dry=`$NVCC --dryrun conftest.cu -o conftest 2>&1`
    rm -f conftest.cu
    si_cuda_inc=`echo "$si_cuda_dry" | sed -n 's/^#\$ INCLUDES="\(.*\)".*/\1/p' | head -n 1`
    si_cuda_ldirs=`echo "$si_cuda_dry" | sed -n 's/^#\$ LIBRARIES= *//p' | head -n 1 | tr -d '"'`
    si_cuda_home=`readlink -f "$NVCC" 2>/dev/null || echo "$NVCC"`
    si_cuda_home=`AS_DIRNAME(["$si_cuda_home"])`
    si_cuda_home=`AS_DIRNAME(["$si_cuda_home"])`
    CUDA_CFLAGS="$si_cuda_inc"
    test -d "$si_cuda_home/include" && CUDA_CFLAGS="$CUDA_CFLAGS -I$si_cuda_home/include"
    si_cuda_L=""
    for d in $si_cuda_ldirs; do
      AS_CASE([$d], [*/stubs], [], [-L*], [si_cuda_L="$si_cuda_L $d"])
    done
    for d in "$si_cuda_home/lib64" "$si_cuda_home/lib"; do
      test -d "$d" && si_cuda_L="$si_cuda_L -L$d"
    done
    CUDA_LIBS="$si_cuda_L -lcudart_static -lrt -lpthread -ldl -lstdc++"
    CUDA_GENCODE=""
    for a in `echo "$with_cuda_arch" | tr ',' ' '`; do
      AS_CASE([$a], [[[0-9]]*a], [si_cuda_num=`echo "$a" | sed 's/a$//'`], [si_cuda_num=$a])
      AS_CASE([$si_cuda_num], [*[[!0-9]]*|''], [AC_MSG_ERROR([--with-cuda-arch: '$a' is not an SM number like 90, 90a or 120])])
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
    AS_IF([test "x$si_cuda_ok" = xyes], [
      AC_MSG_CHECKING([whether C code links against the CUDA runtime ($CUDA_CFLAGS)])
      si_cuda_save_CFLAGS=$CFLAGS; si_cuda_save_LIBS=$LIBS
      CFLAGS="$CFLAGS $CUDA_CFLAGS"; LIBS="$CUDA_LIBS $LIBS"
      AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <cuda_runtime_api.h>]],
                                      [[int n = 0; return (int)cudaGetDeviceCount(&n);]])],
        [AC_MSG_RESULT([yes])],
        [AC_MSG_RESULT([no]); si_cuda_ok=no
         si_cuda_why="cuda_runtime_api.h or libcudart_static not usable next to $NVCC (CUDA_CFLAGS='$CUDA_CFLAGS'; see config.log)"])
      CFLAGS=$si_cuda_save_CFLAGS; LIBS=$si_cuda_save_LIBS
    ])
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
