# meshctl's everyday targets. `make demo` runs meshctl's main job on the embedded bus;
# `make test` runs the whole suite as CI does.

GO        ?= go
BIN       := bin/meshctl
STATE     ?= .meshctl/demo
# Packages run in parallel; every live test starts its own bus on a random port.
TESTFLAGS ?= -race -count=1 -timeout 8m

.PHONY: build test test-compat vet fmt demo demo-node example-operator bench clean

build:
	$(GO) build -o $(BIN) ./cmd/meshctl

test:
	$(GO) vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))" || (echo "gofmt would change:"; gofmt -l .; exit 1)
	$(GO) test $(TESTFLAGS) ./...

# The external-server tests against each supported nats-server release, built from the module
# proxy (scripts/test-compat); NATS_RELEASES="2.12.15" picks one.
test-compat:
	scripts/test-compat

vet:
	$(GO) vet ./...

fmt:
	gofmt -w $$(git ls-files '*.go')

# The main job on the embedded default: validate the quickstart mesh, apply it to an
# embedded bus whose store lives in $(STATE), and show that a second diff is clean. Its bus
# listens on 127.0.0.1:4222; with PORT=… on 127.0.0.1:$(PORT) instead, from a copy of the
# quickstart beside the store whose bus.yaml says so, as demo-node does.
DEMO_MESH = $(if $(PORT),$(STATE)-mesh,examples/quickstart)
demo: build
ifneq ($(PORT),)
	rm -rf $(DEMO_MESH) && mkdir -p $(DEMO_MESH) && cp examples/quickstart/*.yaml $(DEMO_MESH)/
	printf 'bus:\n  listen: 127.0.0.1:%s\n' '$(PORT)' >$(DEMO_MESH)/bus.yaml
endif
	./$(BIN) validate -f $(DEMO_MESH)
	./$(BIN) apply -f $(DEMO_MESH) --state $(STATE)
	./$(BIN) diff -f $(DEMO_MESH) --state $(STATE)

# A node enrolling: watch on the quickstart mesh (its bus on 127.0.0.1:$(PORT)), one
# enrolment credential issued, and `meshctl agent` receiving its modules' memberships.
demo-node: build
	PORT=$(or $(PORT),4333) BIN=./$(BIN) sh examples/enrol/demo.sh

# Operator mode from nothing: an operator made with the nats CLI, three nats-server processes
# trusting it on 127.0.0.1:$(PORT)… (nine ports from 24222 by default), a mesh applied into its
# account, a host's creds issued, used and revoked (examples/operator/README.md).
example-operator: build
	$(if $(PORT),PORT=$(PORT) )BIN=./$(BIN) examples/operator/run.sh

# BENCHFLAGS picks sizes and runs, e.g. BENCHFLAGS="-wait-sizes 5000,20000 -runs 5"; see
# `go run ./bench -h`. The figures are only worth committing from a quiet machine.
bench: build
	$(GO) run ./bench -out docs/BENCHMARKS.md $(BENCHFLAGS)

clean:
	rm -rf bin .meshctl
