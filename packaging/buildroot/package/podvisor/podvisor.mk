################################################################################
#
# podvisor
#
################################################################################

# Built from the checkout this BR2_EXTERNAL tree lives in
# (packaging/buildroot): `make BR2_EXTERNAL=/path/to/podvisor/packaging/buildroot`.
# For a release from git, set PODVISOR_SITE to the repository and
# PODVISOR_VERSION to the tag, drop PODVISOR_SITE_METHOD, and add the
# tarball's sha256 to podvisor.hash.
PODVISOR_VERSION = $(shell git -C $(BR2_EXTERNAL_PODVISOR_PATH) describe --tags --always --dirty 2>/dev/null || echo dev)
PODVISOR_SITE = $(realpath $(BR2_EXTERNAL_PODVISOR_PATH)/../..)
PODVISOR_SITE_METHOD = local
# The binaries built here are podvisor's own code; the MIT-licensed
# broker in third_party/ is linked into podhub only, not built here.
PODVISOR_LICENSE = Apache-2.0
PODVISOR_LICENSE_FILES = LICENSE NOTICE
PODVISOR_GOMOD = github.com/podvisor/podvisor

# Static, without cgo, as every podvisor release. A local source is not
# vendored by Buildroot's download step, so go fetches the modules of
# go.sum here (GOFLAGS/GOPROXY override the offline defaults).
PODVISOR_GO_ENV = CGO_ENABLED=0 GOFLAGS=-mod=mod GOPROXY=$(or $(GOPROXY),https://proxy.golang.org)
PODVISOR_LDFLAGS = -s -w -X main.version=$(PODVISOR_VERSION)
PODVISOR_TAGS = osusergo netgo

PODVISOR_BUILD_TARGETS = cmd/podvisor cmd/podvisor-shim
ifeq ($(BR2_PACKAGE_PODVISOR_CONTAINERD),y)
PODVISOR_BUILD_TARGETS += cmd/podvisor-containerd
endif

# Each binary with its own flags (build tags, where inlining is off:
# packaging/buildflags.sh), as make and the releases build it; otherwise
# golang-package's build step (its -tags is replaced by the binary's tags
# joined to PODVISOR_TAGS).
define PODVISOR_BUILD_CMDS
	$(foreach d,$(PODVISOR_BUILD_TARGETS),\
		cd $(@D); \
		$(HOST_GO_TARGET_ENV) $(PODVISOR_GO_ENV) \
			$(GO_BIN) build -v $(PODVISOR_BUILD_OPTS) \
			$$($(@D)/packaging/buildflags.sh $(notdir $(d)) $(PODVISOR_TAGS)) \
			-o $(@D)/bin/$(notdir $(d)) $(PODVISOR_GOMOD)/$(d)
	)
endef

# PODVISOR_INSTALL_BINS is not set: Buildroot before 2025 installs only
# the package's name by default, later versions refuse the variable. The
# install step names the binaries itself, which both honour.
define PODVISOR_INSTALL_TARGET_CMDS
	$(foreach b,$(notdir $(PODVISOR_BUILD_TARGETS)),\
		$(INSTALL) -D -m 0755 $(@D)/bin/$(b) $(TARGET_DIR)/usr/bin/$(b)
	)
	$(INSTALL) -D -m 0644 $(@D)/packaging/config.yaml $(TARGET_DIR)/etc/podvisor/config.yaml
	mkdir -p $(TARGET_DIR)/etc/podvisor/manifests $(TARGET_DIR)/etc/podvisor/priorityclasses
	mkdir -p -m 0700 $(TARGET_DIR)/var/lib/podvisor
endef

define PODVISOR_INSTALL_INIT_SYSTEMD
	$(INSTALL) -D -m 0644 $(@D)/packaging/systemd/podvisor.service \
		$(TARGET_DIR)/usr/lib/systemd/system/podvisor.service
endef

# Busybox init and SysV init run /etc/init.d/S* scripts in order.
define PODVISOR_INSTALL_INIT_SYSV
	$(INSTALL) -D -m 0755 $(@D)/packaging/sysvinit/podvisor \
		$(TARGET_DIR)/etc/init.d/S90podvisor
endef

define PODVISOR_INSTALL_INIT_OPENRC
	$(INSTALL) -D -m 0755 $(@D)/packaging/openrc/podvisor \
		$(TARGET_DIR)/etc/init.d/podvisor
endef

$(eval $(golang-package))
