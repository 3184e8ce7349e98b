# Unity (jumbo) builds: each target's .cc files compiled a few at a time, as one translation
# unit per batch. Our sources are small and their headers (gRPC, protobuf, abseil, GoogleTest,
# cpprestsdk) heavy: parsing those headers is most of every compile (clang -fsyntax-only takes
# 6.7 of a test file's 7.6 s), so a batch costs little more than one file (the operator
# library under ASan: 156 CPU-seconds file by file, 77 in four batches, on a busier machine).
#
# Hand-written rather than CMake's UNITY_BUILD because CMake's batches include each source by
# its absolute path: the batch's text, and so ccache's key, would then differ in every
# checkout, and a fresh clone (CI's) would compile every batch again. These batches include
# each source by its path relative to the batch, the same in every checkout.
#
# Names at namespace scope must therefore be unique across a target's files, anonymous
# namespaces and `static` included (a unity build's compile error names the clash).

set(COHORT_UNITY_BATCH 8 CACHE STRING "Sources per unity batch (COHORT_UNITY builds)")

# Writes FILE only when its text changes: the build configures on every `make`, and a batch
# rewritten with the same text would still compile again (ninja goes by the time stamp).
function(_cohort_unity_write file text)
  if(EXISTS ${file})
    file(READ ${file} old)
    if(old STREQUAL text)
      return()
    endif()
  endif()
  file(WRITE ${file} "${text}")
endfunction()

# cohort_unity_target(TARGET): replaces TARGET's own .cc sources with batches of them.
# Generated sources (under the build directory) and single-source targets are left alone.
function(cohort_unity_target target)
  get_target_property(type ${target} TYPE)
  if(NOT type MATCHES "^(STATIC_LIBRARY|SHARED_LIBRARY|MODULE_LIBRARY|OBJECT_LIBRARY|EXECUTABLE)$")
    return()
  endif()
  get_target_property(imported ${target} IMPORTED)
  if(imported)
    return()
  endif()
  get_target_property(sources ${target} SOURCES)
  get_target_property(source_dir ${target} SOURCE_DIR)
  set(own "")
  foreach(source IN LISTS sources)
    if(source MATCHES "^\\$<" OR NOT source MATCHES "\\.cc$")
      continue()
    endif()
    get_filename_component(path ${source} ABSOLUTE BASE_DIR ${source_dir})
    file(RELATIVE_PATH from_build ${CMAKE_BINARY_DIR} ${path})
    if(NOT from_build MATCHES "^\\.\\./")  # generated into the build directory
      continue()
    endif()
    list(APPEND own ${path})
  endforeach()
  list(LENGTH own count)
  if(count LESS 2)
    return()
  endif()
  set(dir ${CMAKE_BINARY_DIR}/unity)
  set(batch "")
  set(filled 0)
  set(index 0)
  set(batches "")
  foreach(path IN LISTS own)
    file(RELATIVE_PATH relative ${dir} ${path})
    # (The NOLINT: clang-tidy checks batches as the build compiles them, tools/lint.py.)
    string(APPEND batch "#include \"${relative}\"  // NOLINT(bugprone-suspicious-include)\n")
    math(EXPR filled "${filled} + 1")
    if(filled EQUAL COHORT_UNITY_BATCH)
      _cohort_unity_write(${dir}/${target}_${index}.cc "${batch}")
      list(APPEND batches ${dir}/${target}_${index}.cc)
      math(EXPR index "${index} + 1")
      set(batch "")
      set(filled 0)
    endif()
  endforeach()
  if(NOT batch STREQUAL "")
    _cohort_unity_write(${dir}/${target}_${index}.cc "${batch}")
    list(APPEND batches ${dir}/${target}_${index}.cc)
  endif()
  set_source_files_properties(${own} TARGET_DIRECTORY ${target} PROPERTIES HEADER_FILE_ONLY ON)
  target_sources(${target} PRIVATE ${batches})
endfunction()

# cohort_unity_directory(DIR): every target defined in DIR and below it.
function(cohort_unity_directory dir)
  get_property(targets DIRECTORY ${dir} PROPERTY BUILDSYSTEM_TARGETS)
  foreach(target IN LISTS targets)
    cohort_unity_target(${target})
  endforeach()
  get_property(subdirectories DIRECTORY ${dir} PROPERTY SUBDIRECTORIES)
  foreach(subdirectory IN LISTS subdirectories)
    cohort_unity_directory(${subdirectory})
  endforeach()
endfunction()
