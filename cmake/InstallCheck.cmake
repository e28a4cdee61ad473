# ctest script: install the build tree into a fresh prefix, then configure, build and
# run cmake/consumer against it with find_package(vnpu).
# Inputs: VNPU_BUILD_DIR, VNPU_CONSUMER_SRC, VNPU_WORK_DIR, VNPU_GENERATOR, VNPU_C_COMPILER,
# VNPU_SONAME, VNPU_CHECK (find_package, the default, or pkgconfig: the same program built
# with `pkg-config vnpu` and `pkg-config libdnn` instead). Both check the installed files.
file(REMOVE_RECURSE "${VNPU_WORK_DIR}")
set(prefix "${VNPU_WORK_DIR}/prefix")
set(build "${VNPU_WORK_DIR}/consumer-build")

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "command failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  message(STATUS "${out}")
endfunction()

run(${CMAKE_COMMAND} --install "${VNPU_BUILD_DIR}" --prefix "${prefix}")
foreach(f vnpu.h dnn/hb_dnn.h dnn/hb_sys.h dnn/hb_dnn_status.h dnn/hb_dnn_ext.h
          dnn/plugin/hb_dnn_layer.h dnn/plugin/hb_dnn_plugin.h)
  if(NOT EXISTS "${prefix}/include/${f}")
    message(FATAL_ERROR "install is missing include/${f}")
  endif()
endforeach()
file(GLOB config "${prefix}/lib*/cmake/vnpu/vnpuConfig.cmake")
file(GLOB dnn_alias "${prefix}/lib*/libdnn.so")
if(NOT config OR NOT dnn_alias)
  message(FATAL_ERROR "install is missing vnpuConfig.cmake or the libdnn.so alias")
endif()

# The CLI, the pkg-config files and the versioned library names.
if(NOT EXISTS "${prefix}/bin/vnpu")
  message(FATAL_ERROR "install is missing bin/vnpu")
endif()
run("${prefix}/bin/vnpu" --help)
file(GLOB libdir LIST_DIRECTORIES true "${prefix}/lib*")
list(GET libdir 0 libdir)
foreach(f pkgconfig/vnpu.pc pkgconfig/libdnn.pc libvnpu.so ${VNPU_SONAME})
  if(NOT EXISTS "${libdir}/${f}")
    message(FATAL_ERROR "install is missing ${libdir}/${f}")
  endif()
endforeach()
file(GLOB real "${libdir}/libvnpu.so.*.*.*")
if(NOT real)
  message(FATAL_ERROR "install is missing the versioned libvnpu.so.X.Y.Z")
endif()
find_program(READELF readelf)
if(READELF)
  execute_process(COMMAND ${READELF} -d ${real} OUTPUT_VARIABLE dyn)
  if(NOT dyn MATCHES "SONAME[^\n]*\\[${VNPU_SONAME}\\]")
    message(FATAL_ERROR "libvnpu's SONAME is not ${VNPU_SONAME}:\n${dyn}")
  endif()
endif()

if(NOT VNPU_CHECK STREQUAL "pkgconfig")
  run(${CMAKE_COMMAND} -S "${VNPU_CONSUMER_SRC}" -B "${build}" -G "${VNPU_GENERATOR}"
      "-DCMAKE_PREFIX_PATH=${prefix}")
  run(${CMAKE_COMMAND} --build "${build}")
  run("${build}/consumer")
  return()
endif()

# pkg-config consumers: `pkg-config --cflags --libs vnpu` and the board style
# `pkg-config libdnn` (-ldnn and -I include/dnn, as board makefiles use).
find_program(PKG_CONFIG pkg-config)
if(PKG_CONFIG)
  foreach(pc vnpu libdnn)
    execute_process(
      COMMAND ${CMAKE_COMMAND} -E env "PKG_CONFIG_PATH=${libdir}/pkgconfig"
              ${PKG_CONFIG} --cflags --libs ${pc}
      RESULT_VARIABLE rc OUTPUT_VARIABLE flags OUTPUT_STRIP_TRAILING_WHITESPACE)
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "pkg-config ${pc} failed")
    endif()
    separate_arguments(flags UNIX_COMMAND "${flags}")
    set(exe "${VNPU_WORK_DIR}/pkgconfig_${pc}")
    run(${VNPU_C_COMPILER} -Wall -Wextra -Werror "${VNPU_CONSUMER_SRC}/main.c" -o "${exe}" ${flags})
    run(${CMAKE_COMMAND} -E env "LD_LIBRARY_PATH=${libdir}" "${exe}")
    message(STATUS "pkg-config ${pc}: ${flags}")
  endforeach()
else()
  message(FATAL_ERROR "pkg-config not found: cannot test the pkg-config consumers")
endif()
