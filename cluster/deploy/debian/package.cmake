# The .deb package (`cpack -G DEB` in the build directory, or
# `cmake --build build --target package`): tallyd and tallyctl in /usr/bin,
# the C++ client library (static, with its headers and tally-client.pc), the systemd unit, a default /etc/tally/tallyd.toml (a conffile: an upgrade
# keeps the operator's edits) whose data directory is /var/lib/tally, and the
# docs. postinst creates the system user `tally`. Dependencies on Debian's
# runtime libraries come from dpkg-shlibdeps (dpkg-dev).
set(deploy_dir ${PROJECT_SOURCE_DIR}/cluster/deploy)
install(TARGETS tallyd tallyctl RUNTIME DESTINATION bin)
install(FILES ${deploy_dir}/systemd/tallyd.service DESTINATION /lib/systemd/system)
install(FILES ${deploy_dir}/debian/tallyd.toml DESTINATION /etc/tally)
install(FILES ${PROJECT_SOURCE_DIR}/README.md DESTINATION share/doc/tally)
install(FILES ${PROJECT_SOURCE_DIR}/LICENSE DESTINATION share/doc/tally RENAME copyright)

# The C++ client library (protocol/client.h, docs/clients.md) for programs of one's own: its
# static libraries, the headers it includes under /usr/include/tally (the paths the source
# uses), and pkg-config's tally-client.pc. Linking it needs libcapnp-dev and libssl-dev.
install(TARGETS tally_client tally_protocol tally_common ARCHIVE DESTINATION lib)
foreach(header protocol/client.h protocol/codec.h protocol/frame_buffer.h protocol/messages.h
               node/common/descriptor.h node/common/limit.h node/common/status.h)
  get_filename_component(folder ${header} DIRECTORY)
  install(FILES ${PROJECT_SOURCE_DIR}/${header} DESTINATION include/tally/${folder})
endforeach()
configure_file(${deploy_dir}/debian/tally-client.pc.in tally-client.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/tally-client.pc DESTINATION lib/pkgconfig)

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME tally)
set(CPACK_PACKAGE_VENDOR tally)
set(CPACK_PACKAGE_CONTACT "tally maintainers <maintainers@tally.invalid>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "distributed rate limiter (tallyd, tallyctl)")
set(CPACK_PACKAGE_DESCRIPTION
    "Each tallyd node decides rate limits locally with sliding-window counters and \
exchanges per-key CRDT counts with its peers, so a global limit converges without a \
central store; counters persist in RocksDB.")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)  # tally_<version>_<arch>.deb
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS adduser)  # postinst; dpkg-shlibdeps appends the libraries
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "libcapnp-dev, libssl-dev")  # to link the client library
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA ${deploy_dir}/debian/postinst ${deploy_dir}/debian/conffiles)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
include(CPack)
