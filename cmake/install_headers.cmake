# Installs the internal headers that the public ones reach, and no others (run at install time,
# so that a header gaining an include is installed without a new configure).
# In: GENGRAPH_SOURCE_DIR, GENGRAPH_HEADER_DESTINATION (absolute: the prefix's include/gengraph).
# Public headers (include/gengraph/*.h) include them as "framework/...", "backends/..."; an
# installed header keeps its path under include/gengraph/, where those includes find it.
cmake_policy(PUSH)
cmake_policy(VERSION 3.25)  # install scripts run without the project's policies (IN_LIST)
file(GLOB todo "${GENGRAPH_SOURCE_DIR}/include/gengraph/*.h")
set(reached "")
while(todo)
  list(POP_FRONT todo header)
  file(STRINGS "${header}" lines REGEX "^#include \"(framework|backends|experiments)/[^\"]+\"")
  foreach(line IN LISTS lines)
    string(REGEX REPLACE "^#include \"([^\"]+)\".*$" "\\1" path "${line}")
    if(NOT path IN_LIST reached)
      if(NOT EXISTS "${GENGRAPH_SOURCE_DIR}/${path}")
        message(FATAL_ERROR "${header}: includes \"${path}\", which is not in ${GENGRAPH_SOURCE_DIR}")
      endif()
      list(APPEND reached "${path}")
      list(APPEND todo "${GENGRAPH_SOURCE_DIR}/${path}")
    endif()
  endforeach()
endwhile()
list(SORT reached)
foreach(path IN LISTS reached)
  get_filename_component(folder "${path}" DIRECTORY)
  file(INSTALL DESTINATION "${GENGRAPH_HEADER_DESTINATION}/${folder}" TYPE FILE
       FILES "${GENGRAPH_SOURCE_DIR}/${path}")
endforeach()
list(LENGTH reached count)
message(STATUS "Installed the ${count} internal headers the public ones include")
cmake_policy(POP)
