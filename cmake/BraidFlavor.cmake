# Chooses the build flavor (BRAID_GPU = none | cuda | hip) and sets up its
# toolchain. Defines:
#   BRAID_GPU             the flavor
#   braid_gpu_runtime     INTERFACE target: the GPU runtime library (empty for none)
#   braid_device_flags    INTERFACE target: what device sources (.hip) need
#   braid_add_device_sources(target ...)  adds HIP-syntax sources to a target
#
# Device code is written once in HIP syntax. The cuda flavor compiles it with
# nvcc, mapping hip* onto CUDA through src/platform/gpu_runtime.h; the hip
# flavor compiles it with ROCm's clang (-x hip).

set(_braid_gpu_default none)
if(NOT DEFINED BRAID_GPU)
  # Pick a GPU flavor only when both a toolkit and a GPU are present.
  find_program(_braid_nvidia_smi nvidia-smi)
  find_program(_braid_nvcc nvcc HINTS /usr/local/cuda/bin)
  find_program(_braid_rocminfo rocminfo)
  if(_braid_nvcc AND _braid_nvidia_smi)
    execute_process(COMMAND ${_braid_nvidia_smi} -L OUTPUT_VARIABLE _smi RESULT_VARIABLE _rc ERROR_QUIET)
    if(_rc EQUAL 0 AND _smi MATCHES "GPU [0-9]+:")
      set(_braid_gpu_default cuda)
    endif()
  elseif(_braid_rocminfo AND EXISTS /dev/kfd)
    execute_process(COMMAND ${_braid_rocminfo} OUTPUT_VARIABLE _ri RESULT_VARIABLE _rc ERROR_QUIET)
    if(_rc EQUAL 0 AND _ri MATCHES "gfx[0-9a-f]+")
      set(_braid_gpu_default hip)
    endif()
  endif()
endif()
set(BRAID_GPU ${_braid_gpu_default} CACHE STRING "GPU flavor: none (host only), cuda or hip")
set_property(CACHE BRAID_GPU PROPERTY STRINGS none cuda hip)

add_library(braid_gpu_runtime INTERFACE)
add_library(braid_device_flags INTERFACE)

if(BRAID_GPU STREQUAL "none")
  set(BRAID_STREAM_INCLUDE "")
  set(BRAID_STREAM_TYPE "struct braidHostStream*")
elseif(BRAID_GPU STREQUAL "cuda")
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES AND NOT DEFINED ENV{CUDAARCHS})
    set(CMAKE_CUDA_ARCHITECTURES 90 CACHE STRING "CUDA architectures (sm_XX numbers)")
  endif()
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  enable_language(CUDA)
  set(CMAKE_CUDA_STANDARD 17)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  find_package(CUDAToolkit REQUIRED)
  # Static runtime, as NCCL does: libnccl.so.2 then needs only the driver.
  target_link_libraries(braid_gpu_runtime INTERFACE CUDA::cudart_static)
  target_compile_definitions(braid_gpu_runtime INTERFACE BRAID_GPU_CUDA=1)
  target_compile_options(braid_device_flags INTERFACE
    $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr -Xcompiler=-fvisibility=hidden>)
  set(BRAID_STREAM_INCLUDE "#include <cuda_runtime_api.h>")
  set(BRAID_STREAM_TYPE "cudaStream_t")
elseif(BRAID_GPU STREQUAL "hip")
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "BRAID_GPU=hip needs ROCm's clang as the C++ compiler: configure with "
                        "-DCMAKE_CXX_COMPILER=clang++-15 (Debian's HIP) or "
                        "-DCMAKE_CXX_COMPILER=/opt/rocm/llvm/bin/clang++ (ROCm), or use the 'hip' preset.")
  endif()
  set(BRAID_HIP_ARCHITECTURES "gfx90a;gfx940" CACHE STRING "AMD GPU architectures (ROCm 6.x users add gfx942)")
  set(GPU_TARGETS ${BRAID_HIP_ARCHITECTURES} CACHE STRING "" FORCE)
  set(AMDGPU_TARGETS ${BRAID_HIP_ARCHITECTURES} CACHE STRING "" FORCE)
  find_package(hip REQUIRED CONFIG PATHS /opt/rocm /usr/lib/x86_64-linux-gnu/cmake/hip)
  get_filename_component(_hip_root "${hip_INCLUDE_DIR}" DIRECTORY)
  set(BRAID_ROCM_PATH "${_hip_root}" CACHE PATH "ROCm installation root")
  find_path(BRAID_HIP_DEVICE_LIB_PATH ockl.bc
    PATHS ${BRAID_ROCM_PATH}/amdgcn/bitcode ${BRAID_ROCM_PATH}/lib/x86_64-linux-gnu/amdgcn/bitcode
          /usr/lib/x86_64-linux-gnu/amdgcn/bitcode /opt/rocm/amdgcn/bitcode
    NO_DEFAULT_PATH)
  if(NOT BRAID_HIP_DEVICE_LIB_PATH)
    message(FATAL_ERROR "ROCm device libraries (ockl.bc) not found; set BRAID_HIP_DEVICE_LIB_PATH")
  endif()
  target_link_libraries(braid_gpu_runtime INTERFACE hip::host)
  target_compile_definitions(braid_gpu_runtime INTERFACE BRAID_GPU_HIP=1)
  target_link_libraries(braid_device_flags INTERFACE hip::device)
  target_compile_options(braid_device_flags INTERFACE
    --rocm-path=${BRAID_ROCM_PATH} --hip-device-lib-path=${BRAID_HIP_DEVICE_LIB_PATH})
  # Debug builds keep host DWARF; device DWARF (for rocgdb inside kernels)
  # costs a fifth of each kernel source's compile time, so it is opt-in.
  option(BRAID_HIP_DEVICE_DEBUG "hip flavor: DWARF for device code too" OFF)
  if(NOT BRAID_HIP_DEVICE_DEBUG)
    target_compile_options(braid_device_flags INTERFACE "SHELL:-Xarch_device -g0")
  endif()
  set(BRAID_STREAM_INCLUDE "#include <hip/hip_runtime_api.h>")
  set(BRAID_STREAM_TYPE "hipStream_t")
else()
  message(FATAL_ERROR "BRAID_GPU must be none, cuda or hip (got '${BRAID_GPU}')")
endif()

# Adds HIP-syntax device sources to TARGET, compiled by the flavor's device compiler.
function(braid_add_device_sources target)
  if(BRAID_GPU STREQUAL "none")
    return()
  endif()
  target_sources(${target} PRIVATE ${ARGN})
  if(BRAID_GPU STREQUAL "cuda")
    set_source_files_properties(${ARGN} TARGET_DIRECTORY ${target} PROPERTIES LANGUAGE CUDA)
  else()
    set_source_files_properties(${ARGN} TARGET_DIRECTORY ${target} PROPERTIES LANGUAGE CXX)
  endif()
endfunction()

if(BRAID_SANITIZE STREQUAL "address")
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
  set(BRAID_SANITIZE_MSG ", sanitizers: ASan+UBSan")
elseif(BRAID_SANITIZE STREQUAL "thread")
  add_compile_options(-fsanitize=thread -fno-omit-frame-pointer)
  add_link_options(-fsanitize=thread)
  set(BRAID_SANITIZE_MSG ", sanitizer: TSan")
elseif(NOT BRAID_SANITIZE STREQUAL "")
  message(FATAL_ERROR "BRAID_SANITIZE must be '', 'address' or 'thread'")
endif()
if(BRAID_SANITIZE AND NOT BRAID_GPU STREQUAL "none")
  message(FATAL_ERROR "sanitizer builds are for the host flavor (BRAID_GPU=none)")
endif()
