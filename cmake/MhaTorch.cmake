# LibTorch for mha-serve: found once, used through one target (mha::torch), and immune to the
# three traps of LibTorch as a PyTorch wheel (or an official zip) ships it (docs/gpu.md, "Three
# defects"). Included by the root CMakeLists.txt; the guards are tests/wheel/ (ctest label "build").
#
#  1. Bundled third-party headers. The wheel's include root (site-packages/torch/include) holds
#     google/protobuf/ and fmt/ of other versions than the system's. GCC searches every -isystem
#     dir before /usr/include, so no include order can keep them from shadowing Debian's. Here each
#     include dir of LibTorch's imported targets that holds such a folder is replaced by a filtered
#     view: a folder of links to its entries minus the libraries the project takes from elsewhere
#     (MHA_TORCH_HIDDEN_HEADERS). LibTorch's own headers (ATen, c10, torch, caffe2) need none of
#     them: on the H200 the core built with those two folders moved aside.
#  2. Exported libstdc++ symbols. The wheel's libtorch.so exports its own copy of some libstdc++
#     functions (std::filesystem among them, pytorch/pytorch#133437). The dynamic linker binds a
#     symbol to the first library in a binary's lookup scope (the binary, then its DT_NEEDED in
#     order), and the compiler driver adds -lstdc++ last, after LibTorch: so the binary's
#     std::filesystem calls went to libtorch.so's copy and crashed. Every binary of the project
#     names libstdc++ before everything else on its link line (a directory-wide link option, so
#     that no binary depends on which target brought LibTorch to it: CMake 3.25 does not carry a
#     private dependency's link options to the binaries), so libstdc++.so.6 is its first DT_NEEDED
#     and its symbols win (the binary's references are bound to its versioned definitions at link
#     time too).
#  3. An empty protobuf::libprotobuf. The wheel links protobuf statically and its Caffe2Config.cmake
#     defines protobuf::libprotobuf as an empty INTERFACE target when none exists yet; every target
#     that linked "protobuf" then linked nothing, and mha-server's OIP map fields were left
#     undefined. The root finds Protobuf before Torch; mha_check_protobuf_target() fails the
#     configure if the target is empty anyway.

set(MHA_TORCH_HIDDEN_HEADERS
  google fmt spdlog nlohmann gtest gmock benchmark grpc grpcpp grpc++ absl prometheus CLI
  openssl httplib.h png.h pngconf.h pnglibconf.h
  CACHE STRING "Entries of LibTorch's include roots hidden from the build (the system's win)")

# _mha_torch_targets(<out>): the imported targets reachable from TORCH_LIBRARIES.
function(_mha_torch_targets out)
  set(queue ${TORCH_LIBRARIES})
  set(seen "")
  while(queue)
    list(POP_FRONT queue item)
    string(REGEX REPLACE "^\\$<LINK_ONLY:(.*)>$" "\\1" item "${item}")
    if(NOT TARGET "${item}")
      continue()
    endif()
    get_target_property(aliased "${item}" ALIASED_TARGET)
    if(aliased)
      set(item "${aliased}")
    endif()
    if("${item}" IN_LIST seen)
      continue()
    endif()
    list(APPEND seen "${item}")
    get_target_property(deps "${item}" INTERFACE_LINK_LIBRARIES)
    if(deps)
      list(APPEND queue ${deps})
    endif()
  endwhile()
  set(${out} "${seen}" PARENT_SCOPE)
endfunction()

# _mha_filtered_view(<dir> <out>): <dir> itself, or a view of it without the hidden entries.
function(_mha_filtered_view dir out)
  set(${out} "${dir}" PARENT_SCOPE)
  get_filename_component(real "${dir}" REALPATH)
  get_filename_component(prefix "${TORCH_INSTALL_PREFIX}" REALPATH)
  # Only LibTorch's own folders (never the system's /usr/include, whose google/ is the one wanted).
  if(NOT IS_DIRECTORY "${real}" OR "${real}" IN_LIST CMAKE_CXX_IMPLICIT_INCLUDE_DIRECTORIES)
    return()
  endif()
  string(FIND "${real}/" "${prefix}/" at)
  if(NOT at EQUAL 0)
    return()
  endif()
  file(GLOB entries RELATIVE "${real}" "${real}/*")
  set(hidden "")
  foreach(e IN LISTS entries)
    if("${e}" IN_LIST MHA_TORCH_HIDDEN_HEADERS)
      list(APPEND hidden "${e}")
    endif()
  endforeach()
  if(NOT hidden)
    return()
  endif()
  string(MD5 key "${real}")
  set(view "${CMAKE_BINARY_DIR}/torch-include/${key}")
  file(REMOVE_RECURSE "${view}")
  file(MAKE_DIRECTORY "${view}")
  foreach(e IN LISTS entries)
    if(NOT "${e}" IN_LIST hidden)
      file(CREATE_LINK "${real}/${e}" "${view}/${e}" SYMBOLIC)
    endif()
  endforeach()
  message(STATUS "mha-serve: LibTorch include dir ${real} used through ${view} (hidden: ${hidden})")
  set(${out} "${view}" PARENT_SCOPE)
endfunction()

# mha_filter_torch_includes(): every LibTorch target's include dirs -> their filtered views. The
# targets: those reachable from TORCH_LIBRARIES, and every other target imported in this directory
# (find_package(Torch) imports c10, torch_cpu, torch_cuda, c10_cuda..., and a wheel gives each of
# them the include root too; torch_library and torch_cpu_library reach them only through generator
# expressions, $<TARGET_PROPERTY:torch_cpu,INTERFACE_INCLUDE_DIRECTORIES>, which the walk above
# does not follow: on the H200 the include root came back that way). Dirs outside LibTorch's
# prefix are left alone (_mha_filtered_view).
function(mha_filter_torch_includes)
  _mha_torch_targets(targets)
  get_directory_property(imported IMPORTED_TARGETS)
  list(APPEND targets ${imported})
  list(REMOVE_DUPLICATES targets)
  foreach(t IN LISTS targets)
    get_target_property(imported "${t}" IMPORTED)
    if(NOT imported)
      continue()
    endif()
    foreach(prop INTERFACE_INCLUDE_DIRECTORIES INTERFACE_SYSTEM_INCLUDE_DIRECTORIES)
      get_target_property(dirs "${t}" ${prop})
      if(NOT dirs)
        continue()
      endif()
      set(new_dirs "")
      foreach(d IN LISTS dirs)
        if(d MATCHES "^\\$<")  # a generator expression: leave it as it is
          list(APPEND new_dirs "${d}")
        else()
          _mha_filtered_view("${d}" v)
          list(APPEND new_dirs "${v}")
        endif()
      endforeach()
      set_target_properties("${t}" PROPERTIES ${prop} "${new_dirs}")
    endforeach()
  endforeach()
endfunction()

# mha_check_protobuf_target(): protobuf::libprotobuf must be a real library (trap 3).
function(mha_check_protobuf_target)
  if(NOT TARGET protobuf::libprotobuf)
    return()
  endif()
  get_target_property(type protobuf::libprotobuf TYPE)
  get_target_property(aliased protobuf::libprotobuf ALIASED_TARGET)
  if(type STREQUAL "INTERFACE_LIBRARY" OR aliased)
    message(FATAL_ERROR "protobuf::libprotobuf is an empty target (${aliased}), not the protobuf "
      "library: LibTorch's Caffe2Config.cmake defined it before Protobuf was found. Find Protobuf "
      "before Torch (docs/gpu.md, trap 3).")
  endif()
endfunction()

# mha_link_first(<interface target> <link item>): <link item> becomes a DT_NEEDED entry ahead of
# every library of the link line (link options precede objects and libraries), even under
# --as-needed, in every binary that links <interface target>.
function(mha_link_first target item)
  if(UNIX AND NOT APPLE AND CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
    target_link_options(${target} INTERFACE
      "SHELL:-Wl,--push-state,--no-as-needed ${item} -Wl,--pop-state")
  endif()
endfunction()

find_package(Torch REQUIRED)
mha_check_protobuf_target()
mha_filter_torch_includes()
# The one way a target links LibTorch (PRIVATE where it is used).
add_library(mha_torch INTERFACE)
add_library(mha::torch ALIAS mha_torch)
target_link_libraries(mha_torch INTERFACE ${TORCH_LIBRARIES})
# A toolchain whose libstdc++ is static (GCC configured --with-static-standard-libraries, or one
# without libstdc++.so, as the H200's /opt/gcc behaved): an archive first on the line contributes
# nothing (nothing is undefined yet), and the objects' std::filesystem references then resolve to
# the first shared library that defines them, LibTorch. One -u per std::filesystem member of
# libstdc++.a (fs_ops.o, fs_path.o, fs_dir.o) makes the binary take those members, so it defines
# std::filesystem itself and its own definitions win; with a shared libstdc++ they are plain
# references to libstdc++.so.6, which is first. (tests/wheel: wheel.stdcxx links both ways.)
set(MHA_STDCXX_FS_ANCHORS
  _ZNSt10filesystem10remove_allERKNS_7__cxx114pathERSt10error_code
  _ZNSt10filesystem7__cxx114path14_M_split_cmptsEv
  _ZNSt10filesystem7__cxx1128recursive_directory_iteratorC1ERKNS0_4pathENS_17directory_optionsEPSt10error_code)
if(UNIX AND NOT APPLE AND CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
  list(TRANSFORM MHA_STDCXX_FS_ANCHORS PREPEND "-Wl,-u," OUTPUT_VARIABLE _mha_anchors)
  list(JOIN _mha_anchors " " _mha_anchors)
  add_link_options("SHELL:-Wl,--push-state,--no-as-needed ${_mha_anchors} -lstdc++ -Wl,--pop-state")
endif()
