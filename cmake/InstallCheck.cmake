# ctest script: install the build tree into a fresh prefix, then configure, build and
# run cmake/consumer against it with find_package(vnpu).
# Inputs: VNPU_BUILD_DIR, VNPU_CONSUMER_SRC, VNPU_WORK_DIR, VNPU_GENERATOR.
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
run(${CMAKE_COMMAND} -S "${VNPU_CONSUMER_SRC}" -B "${build}" -G "${VNPU_GENERATOR}"
    "-DCMAKE_PREFIX_PATH=${prefix}")
run(${CMAKE_COMMAND} --build "${build}")
run("${build}/consumer")
