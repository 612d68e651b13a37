package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/regclient/regclient"
	"github.com/regclient/regclient/types/descriptor"
	"github.com/regclient/regclient/types/platform"
	"github.com/regclient/regclient/types/ref"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// Media types this source understands.
const (
	mtOCIIndex      = "application/vnd.oci.image.index.v1+json"
	mtDockerList    = "application/vnd.docker.distribution.manifest.list.v2+json"
	mtOCIManifest   = "application/vnd.oci.image.manifest.v1+json"
	mtDockerV2      = "application/vnd.docker.distribution.manifest.v2+json"
	mtOCIConfig     = "application/vnd.oci.image.config.v1+json"
	mtDockerConfig  = "application/vnd.docker.container.image.v1+json"
	maxIndexNesting = 3
)

type compression int

const (
	compNone compression = iota
	compGzip
	compZstd
)

// layerTypes maps accepted layer media types to their compression.
// Non-distributable ("foreign") types are accepted only without URLs, i.e.
// when the registry itself serves the blob.
var layerTypes = map[string]compression{
	"application/vnd.oci.image.layer.v1.tar":                       compNone,
	"application/vnd.oci.image.layer.v1.tar+gzip":                  compGzip,
	"application/vnd.oci.image.layer.v1.tar+zstd":                  compZstd,
	"application/vnd.oci.image.layer.nondistributable.v1.tar":      compNone,
	"application/vnd.oci.image.layer.nondistributable.v1.tar+gzip": compGzip,
	"application/vnd.oci.image.layer.nondistributable.v1.tar+zstd": compZstd,
	"application/vnd.docker.image.rootfs.diff.tar":                 compNone,
	"application/vnd.docker.image.rootfs.diff.tar.gzip":            compGzip,
	"application/vnd.docker.image.rootfs.diff.tar.zstd":            compZstd,
	"application/vnd.docker.image.rootfs.foreign.diff.tar.gzip":    compGzip,
	"application/vnd.docker.image.rootfs.foreign.diff.tar":         compNone,
}

// parseRef reads a user-supplied reference in core's grammar
// (core.ParseImageRef: digests validated, messages that never echo the
// reference, which could carry credentials pasted by mistake) and turns it
// into regclient's reference. Only registry references pass, ocidir://
// too when AllowLocalLayouts is set; the registry's address is the egress
// policy's to judge (precheckHost, and every dial).
func (s *Source) parseRef(raw string) (ref.Ref, error) {
	r, err := core.ParseImageRef(raw)
	if err != nil {
		return ref.Ref{}, err
	}
	if r.IsLocalLayout() && !s.opts.AllowLocalLayouts {
		return ref.Ref{}, refErr("scheme %q is not allowed: use a registry reference such as registry.example.com/repo:tag", core.LocalLayoutScheme)
	}
	return regRef(r), nil
}

// regRef is regclient's reference for a parsed one.
func regRef(r core.ImageRef) ref.Ref {
	out := ref.Ref{Scheme: "reg", Registry: r.Registry, Repository: r.Repository, Tag: r.Tag, Digest: r.Digest}
	if r.IsLocalLayout() {
		out = ref.Ref{Scheme: "ocidir", Path: r.LayoutPath, Tag: r.Tag, Digest: r.Digest}
	}
	out.Reference = out.CommonName()
	return out
}

// checkDigest accepts well-formed sha256/sha512 digests only: digests end up
// in URLs and file names.
func checkDigest(s string) (digest.Digest, error) {
	d, err := digest.Parse(s)
	if err != nil {
		return "", fmt.Errorf("%q is not a valid digest", s)
	}
	switch d.Algorithm() {
	case digest.SHA256, digest.SHA512:
		return d, nil
	}
	return "", fmt.Errorf("digest algorithm %q is not accepted (sha256, sha512)", d.Algorithm())
}

// parsePlatform validates OS/ARCH[/VARIANT] with core.ValidatePlatform
// ("" means core.DefaultPlatform).
func parsePlatform(s string) (platform.Platform, error) {
	if s == "" {
		s = core.DefaultPlatform
	}
	if err := core.ValidatePlatform(s); err != nil {
		return platform.Platform{}, err
	}
	p, err := platform.Parse(s)
	if err != nil {
		return platform.Platform{}, &core.FieldError{Field: "platform", Reason: fmt.Sprintf("%q: %v", s, err)}
	}
	return p, nil
}

func checkCreds(req ports.ImageRequest) error {
	if req.Username != "" && req.Password == "" {
		return &core.FieldError{Field: "registry_password", Reason: "is required with registry_username"}
	}
	if req.Password != "" && req.Username == "" {
		return &core.FieldError{Field: "registry_username", Reason: "is required with registry_password"}
	}
	return nil
}

// precheckHost refuses a registry the egress policy forbids before any
// request, so the caller gets a clear 400 instead of a dial error.
func (s *Source) precheckHost(ctx context.Context, r ref.Ref) error {
	host, port := s.registryHost(r.Registry)
	if _, err := s.egress.resolve(ctx, host, port); err != nil {
		if errors.Is(err, ErrEgressDenied) {
			return fmt.Errorf("%w (%w)", refErr("registry %s is not allowed by the egress policy", r.Registry), err)
		}
		return fmt.Errorf("registry %s: %w", r.Registry, err)
	}
	return nil
}

// Resolve pins req to the manifest digest of one platform and returns the
// verified config and layer descriptors.
//
// A retryable failure (network trouble, 5xx and 429 after regclient's own
// retries: regclient does not retry a 503 at all) is retried like a blob
// download, Options.Retries more times with the same backoff; refusals,
// missing images and bad content fail at once.
func (s *Source) Resolve(ctx context.Context, req ports.ImageRequest) (*ports.ResolvedImage, error) {
	delay := s.opts.RetryDelay
	for attempt := 0; ; attempt++ {
		img, err := s.resolve(ctx, req)
		if err == nil || !retryable(err) || attempt >= s.opts.Retries || ctx.Err() != nil {
			return img, newSecrets(req.Username, req.Password).clean(err)
		}
		s.log.DebugContext(ctx, "resolve failed, retrying", "attempt", attempt+1,
			"err", newSecrets(req.Username, req.Password).clean(err).Error())
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, newSecrets(req.Username, req.Password).clean(err)
		case <-t.C:
		}
		delay = min(2*delay, s.opts.RetryMaxDelay)
	}
}

func (s *Source) resolve(ctx context.Context, req ports.ImageRequest) (*ports.ResolvedImage, error) {
	r, err := s.parseRef(req.Ref)
	if err != nil {
		return nil, err
	}
	plat, err := parsePlatform(req.Platform)
	if err != nil {
		return nil, err
	}
	if err := checkCreds(req); err != nil {
		return nil, err
	}
	if r.Scheme == "reg" {
		if err := s.precheckHost(ctx, r); err != nil {
			return nil, err
		}
	}
	name := r.CommonName()
	rc := s.client(r, req)

	top, err := rc.ManifestGet(ctx, r)
	if err != nil {
		return nil, classify(err, "manifest of "+name)
	}
	raw, err := top.RawBody()
	if err != nil {
		return nil, fmt.Errorf("manifest of %s: %w", name, err)
	}
	mt := top.GetDescriptor().MediaType
	alg := digest.SHA256
	if r.Digest != "" {
		alg = digest.Digest(r.Digest).Algorithm()
	}
	manDigest := alg.FromBytes(raw)
	if r.Digest != "" && manDigest.String() != r.Digest {
		return nil, fmt.Errorf("manifest of %s hashes to %s: %w", name, manDigest, ErrDigestMismatch)
	}
	if mt, err = manifestKind(raw, mt); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	s.log.DebugContext(ctx, "manifest resolved", "ref", name, "digest", manDigest.String(), "media_type", mt)

	for depth := 0; mt == mtOCIIndex || mt == mtDockerList; depth++ {
		if depth >= maxIndexNesting {
			return nil, rejectf("%s: indexes nested more than %d deep", name, maxIndexNesting)
		}
		var idx ocispec.Index
		if err := json.Unmarshal(raw, &idx); err != nil {
			return nil, rejectf("%s: index is not valid JSON: %v", name, err)
		}
		d, err := selectPlatform(idx, plat)
		if err != nil {
			return nil, fmt.Errorf("image %s: %w", name, err)
		}
		if d.Size <= 0 || d.Size > s.opts.Limits.MaxManifestBytes {
			return nil, rejectf("%s: platform manifest size %d outside 1..%d", name, d.Size, s.opts.Limits.MaxManifestBytes)
		}
		m, err := rc.ManifestGet(ctx, r.SetDigest(d.Digest.String()))
		if err != nil {
			return nil, classify(err, fmt.Sprintf("manifest %s of %s", d.Digest, name))
		}
		if raw, err = m.RawBody(); err != nil {
			return nil, fmt.Errorf("manifest %s of %s: %w", d.Digest, name, err)
		}
		if got := d.Digest.Algorithm().FromBytes(raw); got != d.Digest || int64(len(raw)) != d.Size {
			return nil, fmt.Errorf("manifest %s of %s: got %d bytes hashing to %s, descriptor says %d bytes: %w",
				d.Digest, name, len(raw), got, d.Size, ErrDigestMismatch)
		}
		manDigest = d.Digest
		mt = m.GetDescriptor().MediaType
		if mt == "" {
			mt = d.MediaType
		}
		if mt, err = manifestKind(raw, mt); err != nil {
			return nil, fmt.Errorf("manifest %s of %s: %w", d.Digest, name, err)
		}
		if d.MediaType != "" && isIndexType(d.MediaType) != isIndexType(mt) {
			return nil, rejectf("manifest %s of %s: the index lists it as %s, it is %s", d.Digest, name, d.MediaType, mt)
		}
	}
	if mt != mtOCIManifest && mt != mtDockerV2 {
		return nil, fmt.Errorf("%s: manifest media type %q is not an image manifest: %w", name, mt, core.ErrUnsupported)
	}
	var man ocispec.Manifest
	if err := json.Unmarshal(raw, &man); err != nil {
		return nil, rejectf("%s: manifest is not valid JSON: %v", name, err)
	}
	if man.SchemaVersion != 2 {
		return nil, rejectf("%s: manifest schemaVersion %d, want 2", name, man.SchemaVersion)
	}
	layers, err := s.checkLayers(man.Layers)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	cfgDesc, cfg, err := s.fetchConfig(ctx, rc, r, man.Config)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if cfg.OS != "" || cfg.Architecture != "" {
		got := platform.Platform{OS: cfg.OS, Architecture: cfg.Architecture, Variant: cfg.Variant}
		if !sameOS(plat, got) || !platform.Compatible(plat, got) {
			return nil, fmt.Errorf("image %s is for %s, not %s: %w", name, got, plat, core.ErrNotFound)
		}
	}
	if err := checkRootFS(cfg, len(layers)); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return &ports.ResolvedImage{
		Ref:              name,
		Digest:           manDigest.String(),
		Platform:         plat.String(),
		Config:           *cfg,
		ConfigDescriptor: cfgDesc,
		Layers:           layers,
	}, nil
}

// selectPlatform picks the best manifest for want from an index. Entries
// without a platform (artifacts), attestations and entries for another OS
// never match.
func selectPlatform(idx ocispec.Index, want platform.Platform) (ocispec.Descriptor, error) {
	comp := platform.NewCompare(want)
	var best ocispec.Descriptor
	var bestPlat platform.Platform
	found := false
	var avail []string
	for _, d := range idx.Manifests {
		if d.Platform == nil || isAttestation(d) {
			continue
		}
		switch d.MediaType {
		case mtOCIManifest, mtDockerV2, mtOCIIndex, mtDockerList:
		default:
			continue
		}
		p := platform.Platform{OS: d.Platform.OS, Architecture: d.Platform.Architecture,
			Variant: d.Platform.Variant, OSVersion: d.Platform.OSVersion, OSFeatures: d.Platform.OSFeatures}
		avail = append(avail, p.String())
		// regclient counts linux images as compatible with windows hosts;
		// a root filesystem must be for the OS asked for.
		if !sameOS(p, want) {
			continue
		}
		if comp.Better(p, bestPlat) {
			best, bestPlat, found = d, p, true
		}
	}
	if !found {
		return ocispec.Descriptor{}, fmt.Errorf("no manifest for platform %s (available: %s): %w",
			want, strings.Join(avail, ", "), core.ErrNotFound)
	}
	if _, err := checkDigest(best.Digest.String()); err != nil {
		return ocispec.Descriptor{}, rejectf("platform manifest: %v", err)
	}
	return best, nil
}

// isAttestation reports whether an index entry is an attestation manifest
// (BuildKit lists them with platform unknown/unknown): never a root
// filesystem, whatever platform is asked for.
func isAttestation(d ocispec.Descriptor) bool {
	return d.Annotations["vnd.docker.reference.type"] == "attestation-manifest" ||
		(d.Platform.OS == "unknown" && d.Platform.Architecture == "unknown")
}

// sameOS reports whether two platforms name the same operating system.
func sameOS(a, b platform.Platform) bool { return strings.EqualFold(a.OS, b.OS) }

// checkLayers enforces the rules on layer descriptors and returns clean
// copies (media type, digest, size, annotations only).
func (s *Source) checkLayers(in []ocispec.Descriptor) ([]ocispec.Descriptor, error) {
	lim := s.opts.Limits
	if len(in) > lim.MaxLayers {
		return nil, rejectf("%d layers, limit %d", len(in), lim.MaxLayers)
	}
	out := make([]ocispec.Descriptor, len(in))
	var total int64
	for i, d := range in {
		if _, err := checkDigest(d.Digest.String()); err != nil {
			return nil, rejectf("layer %d: %v", i, err)
		}
		if _, ok := layerTypes[d.MediaType]; !ok {
			return nil, fmt.Errorf("layer %d (%s): media type %q: %w", i, d.Digest, d.MediaType, core.ErrUnsupported)
		}
		if len(d.URLs) > 0 {
			return nil, rejectf("layer %d (%s) must be fetched from foreign URLs, which is not allowed", i, d.Digest)
		}
		if d.Size < 0 || d.Size > lim.MaxLayerBytes {
			return nil, rejectf("layer %d (%s): size %d outside 0..%d", i, d.Digest, d.Size, lim.MaxLayerBytes)
		}
		total += d.Size
		if total > lim.MaxImageBytes {
			return nil, rejectf("layers total more than %d bytes", lim.MaxImageBytes)
		}
		out[i] = ocispec.Descriptor{MediaType: d.MediaType, Digest: d.Digest, Size: d.Size, Annotations: d.Annotations}
	}
	return out, nil
}

// fetchConfig downloads the config blob named by the manifest descriptor
// and verifies its size and digest against that descriptor (never against
// response headers).
func (s *Source) fetchConfig(ctx context.Context, rc *regclient.RegClient, r ref.Ref, d ocispec.Descriptor) (ocispec.Descriptor, *ocispec.Image, error) {
	if d.MediaType != mtOCIConfig && d.MediaType != mtDockerConfig {
		return d, nil, fmt.Errorf("config media type %q is not an image config: %w", d.MediaType, core.ErrUnsupported)
	}
	if _, err := checkDigest(d.Digest.String()); err != nil {
		return d, nil, rejectf("config: %v", err)
	}
	if d.Size <= 0 || d.Size > s.opts.Limits.MaxConfigBytes {
		return d, nil, rejectf("config size %d outside 1..%d", d.Size, s.opts.Limits.MaxConfigBytes)
	}
	if len(d.URLs) > 0 {
		return d, nil, rejectf("config with foreign URLs")
	}
	clean := ocispec.Descriptor{MediaType: d.MediaType, Digest: d.Digest, Size: d.Size}
	br, err := rc.BlobGet(ctx, r, regDesc(clean))
	if err != nil {
		return d, nil, classify(err, "config "+d.Digest.String())
	}
	defer br.Close()
	b, err := io.ReadAll(io.LimitReader(br, d.Size+1))
	if err != nil {
		return d, nil, classify(err, "config "+d.Digest.String())
	}
	if got := d.Digest.Algorithm().FromBytes(b); int64(len(b)) != d.Size || got != d.Digest {
		return d, nil, fmt.Errorf("config %s: got %d bytes hashing to %s, descriptor says %d bytes: %w",
			d.Digest, len(b), got, d.Size, ErrDigestMismatch)
	}
	var cfg ocispec.Image
	if err := json.Unmarshal(b, &cfg); err != nil {
		return d, nil, rejectf("config %s is not valid JSON: %v", d.Digest, err)
	}
	return clean, &cfg, nil
}

func checkRootFS(cfg *ocispec.Image, layers int) error {
	if cfg.RootFS.Type != "layers" {
		return rejectf("config rootfs.type %q, want \"layers\"", cfg.RootFS.Type)
	}
	if len(cfg.RootFS.DiffIDs) != layers {
		return rejectf("config lists %d diff_ids for %d layers", len(cfg.RootFS.DiffIDs), layers)
	}
	for i, d := range cfg.RootFS.DiffIDs {
		if _, err := checkDigest(d.String()); err != nil {
			return rejectf("config rootfs.diff_ids[%d]: %v", i, err)
		}
	}
	return nil
}

// regDesc converts to regclient's descriptor with only what a fetch needs:
// no URLs (regclient would fall back to them) and no embedded data.
func regDesc(d ocispec.Descriptor) descriptor.Descriptor {
	return descriptor.Descriptor{MediaType: d.MediaType, Digest: d.Digest, Size: d.Size}
}

// manifestKind returns the media type a manifest's bytes are read as: a
// pinned digest names the bytes, not the Content-Type they were served
// with, so the bytes decide. A body with both an index's "manifests" and
// an image's "config" or "layers" is refused (read by its Content-Type it
// would be one image as a manifest and another as an index: the
// CVE-2021-41190 class), as is a body whose own mediaType, or whose
// fields, contradict the media type it came with.
func manifestKind(raw []byte, said string) (string, error) {
	var probe struct {
		MediaType string          `json:"mediaType"`
		Manifests json.RawMessage `json:"manifests"`
		Config    json.RawMessage `json:"config"`
		Layers    json.RawMessage `json:"layers"`
	}
	if err := json.Unmarshal(raw, &probe); err != nil {
		return "", rejectf("manifest is not valid JSON: %v", err)
	}
	index, image := probe.Manifests != nil, probe.Config != nil || probe.Layers != nil
	if index && image {
		return "", rejectf("manifest has both an index's manifests and an image's config or layers")
	}
	mt := said
	if probe.MediaType != "" {
		if said != "" && knownType(said) && knownType(probe.MediaType) && isIndexType(said) != isIndexType(probe.MediaType) {
			return "", rejectf("manifest served as %s says it is %s", said, probe.MediaType)
		}
		mt = probe.MediaType
	}
	if knownType(mt) && (index && !isIndexType(mt) || image && isIndexType(mt)) {
		return "", rejectf("manifest of media type %s has the fields of another kind", mt)
	}
	return mt, nil
}

func isIndexType(mt string) bool { return mt == mtOCIIndex || mt == mtDockerList }

func knownType(mt string) bool {
	return mt == mtOCIIndex || mt == mtDockerList || mt == mtOCIManifest || mt == mtDockerV2
}
