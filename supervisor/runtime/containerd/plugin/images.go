package plugin

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	ctrd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/core/images/archive"
	"github.com/containerd/containerd/v2/core/remotes"
	"github.com/containerd/containerd/v2/core/remotes/docker"
	"github.com/containerd/errdefs"
	"github.com/distribution/reference"

	"github.com/podvisor/podvisor/supervisor/runtime/containerd/pluginapi"
)

// NormalizeImage turns a pod's image into the full reference containerd
// stores ("busybox" → "docker.io/library/busybox:latest").
func NormalizeImage(image string) (string, error) {
	named, err := reference.ParseDockerRef(image)
	if err != nil {
		return "", fmt.Errorf("invalid image name %q: %w", image, err)
	}
	return named.String(), nil
}

// ensureImage finds or pulls the image as the pull policy says, and
// makes sure it is unpacked for the snapshotter. A container limited by
// access (a hub pod's) uses only the local images it may (mayUse); for
// another of that name it pulls, as the kubelet re-pulls an image a pod
// has not shown it may use, and with Never it is refused. A pull
// authenticates with auth.
func (p *Plugin) ensureImage(ctx context.Context, image, policy string, access *pluginapi.LocalImages, auth pluginapi.PullAuth) (ctrd.Image, *pluginapi.Failure) {
	ref, err := NormalizeImage(image)
	if err != nil {
		return nil, &pluginapi.Failure{Reason: pluginapi.InvalidImageName, Message: err.Error()}
	}
	var img ctrd.Image
	refused := false
	if policy != "Always" {
		img, refused, err = p.localImage(ctx, ref, access)
		if err != nil && !errdefs.IsNotFound(err) {
			return nil, &pluginapi.Failure{Reason: pluginapi.ErrImagePull, Message: err.Error()}
		}
	}
	if img == nil && policy == "Never" {
		if refused {
			return nil, &pluginapi.Failure{Reason: pluginapi.ErrImageNeverPull,
				Message: fmt.Sprintf("Container image %q is present with pull policy of Never, but a hub pod may not use it: "+
					"it is a local image of this device, not pulled from a registry, and not in hub.images.shared", image)}
		}
		return nil, &pluginapi.Failure{Reason: pluginapi.ErrImageNeverPull,
			Message: fmt.Sprintf("Container image %q is not present with pull policy of Never", image)}
	}
	if img == nil {
		return p.pull(ctx, ref, access, auth)
	}
	if p.images.get(img) != nil {
		return img, nil // unpacked when its entry was read
	}
	if err := p.unpack(ctx, img); err != nil {
		return nil, &pluginapi.Failure{Reason: pluginapi.CreateContainerError, Message: err.Error()}
	}
	return img, nil
}

// pull pulls an image and records that it came from a registry, as the
// kubelet pulls: with each of the pod's matching logins in turn until one
// succeeds, or anonymously when it has none. Its message is containerd's
// CRI's (failed to pull and unpack image "ref": …), the attempts' errors
// joined as the kubelet joins them. For a container limited by access it
// holds imports off (names), so that no side-loaded image appears under
// the name between the check that the pull may replace what is there
// (pullOver) and the pull's end.
func (p *Plugin) pull(ctx context.Context, ref string, access *pluginapi.LocalImages, auth pluginapi.PullAuth) (ctrd.Image, *pluginapi.Failure) {
	if auth.Error != "" {
		return nil, &pluginapi.Failure{Reason: pluginapi.ErrImagePull, Message: auth.Error}
	}
	if access != nil {
		var done func()
		ctx, done = p.gate.pull(ctx)
		defer done()
	}
	attempts := auth.Credentials
	if len(attempts) == 0 {
		attempts = []pluginapi.Credential{{}}
	}
	var errs []string
	for i, cred := range attempts {
		var creds func(string) (string, string, error)
		if len(auth.Credentials) > 0 {
			creds = func(string) (string, string, error) { return cred.Username, cred.Password, nil }
		}
		img, err := p.pullWith(ctx, ref, access, p.resolver(creds), i+1, len(attempts))
		if err == nil {
			return img, nil
		}
		errs = append(errs, fmt.Sprintf("failed to pull and unpack image %q: %v", ref, err))
	}
	return nil, &pluginapi.Failure{Reason: pluginapi.ErrImagePull, Message: aggregate(errs)}
}

// pullWith is one attempt of a pull, with one resolver.
func (p *Plugin) pullWith(ctx context.Context, ref string, access *pluginapi.LocalImages, resolver remotes.Resolver, attempt, of int) (ctrd.Image, error) {
	if access != nil {
		if existing, err := p.client.ImageService().Get(ctx, ref); err == nil {
			err = pullOver(existing.Labels, existing.Target.Digest.String(), func() (string, error) {
				_, desc, err := resolver.Resolve(ctx, ref)
				return desc.Digest.String(), err
			})
			if err != nil {
				return nil, err
			}
		} else if !errdefs.IsNotFound(err) {
			return nil, err
		}
	}
	p.log.Info("pulling image", "image", ref, "attempt", attempt, "of", of)
	img, err := p.client.Pull(ctx, ref, ctrd.WithPullUnpack, ctrd.WithPullSnapshotter(p.cfg.Snapshotter),
		ctrd.WithResolver(resolver), ctrd.WithPullLabel(labelOrigin, originPull))
	if err == nil {
		err = checkPinned(ref, img)
	}
	if err != nil && access != nil && ctx.Err() != nil {
		err = errors.New("an image import on the device stopped it; it is tried again")
	}
	return img, err
}

// aggregate joins the attempts' errors as the kubelet's error aggregate
// prints them: one alone, else each message once, in brackets.
func aggregate(errs []string) string {
	if len(errs) == 1 {
		return errs[0]
	}
	var seen []string
	for _, e := range errs {
		if !slices.Contains(seen, e) {
			seen = append(seen, e)
		}
	}
	if len(seen) == 1 {
		return seen[0]
	}
	return "[" + strings.Join(seen, ", ") + "]"
}

// localImage finds an image in the store that the container may use
// (mayUse); refused says one is there that it may not. A digest-pinned
// reference (repo@sha256:…, or repo:tag@sha256:… whose tag only
// informs) is found by its digest, as the CRI finds it by repo digest:
// any image of that repository whose target is that digest, whatever it
// is named (a side-loaded busybox:1.36 serves busybox@sha256:… of the
// same content). An image merely named like the reference but of other
// content is not it.
func (p *Plugin) localImage(ctx context.Context, ref string, access *pluginapi.LocalImages) (img ctrd.Image, refused bool, err error) {
	named, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return nil, false, err
	}
	var candidates []ctrd.Image
	if pinned, ok := named.(reference.Digested); ok {
		imgs, err := p.client.ListImages(ctx, fmt.Sprintf("target.digest==%q", pinned.Digest().String()))
		if err != nil {
			return nil, false, err
		}
		for _, img := range imgs {
			if n, err := reference.ParseNormalizedNamed(img.Name()); err == nil && n.Name() == named.Name() {
				candidates = append(candidates, img)
			}
		}
	} else {
		img, err := p.client.GetImage(ctx, ref)
		if err != nil {
			return nil, false, err
		}
		candidates = append(candidates, img)
	}
	for _, img := range candidates {
		if mayUse(access, img.Name(), img.Target().Digest.String(), img.Labels()) {
			return img, false, nil
		}
	}
	return nil, len(candidates) > 0, fmt.Errorf("image %s: %w", ref, errdefs.ErrNotFound)
}

// checkPinned makes sure an image pulled for a digest-pinned reference
// is that digest.
func checkPinned(ref string, img ctrd.Image) error {
	named, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return err
	}
	if pinned, ok := named.(reference.Digested); ok && img.Target().Digest != pinned.Digest() {
		return fmt.Errorf("pulled %s, not the pinned digest %s", img.Target().Digest, pinned.Digest())
	}
	return nil
}

func (p *Plugin) unpack(ctx context.Context, img ctrd.Image) error {
	ok, err := img.IsUnpacked(ctx, p.cfg.Snapshotter)
	if err == nil && !ok {
		err = img.Unpack(ctx, p.cfg.Snapshotter)
	}
	if err != nil {
		return fmt.Errorf("unpacking image %s: %w", img.Name(), err)
	}
	return nil
}

// resolver is a pull's resolver: with creds, a login of the pod's pull
// secrets for whatever registry asks (as containerd's CRI gives the
// kubelet's login); without, the docker config file's login when one is
// configured. A registry on localhost (a device's own mirror) is spoken
// to in plain HTTP, as Docker does; others with the certificates of
// CertsDir (registryClient).
func (p *Plugin) resolver(creds func(string) (string, string, error)) remotes.Resolver {
	client := registryClient(p.cfg.CertsDir)
	if creds == nil && p.cfg.AuthFile != "" {
		creds = func(host string) (string, string, error) { return authFor(p.cfg.AuthFile, host) }
	}
	authOpts := []docker.AuthorizerOpt{docker.WithAuthClient(client)}
	if creds != nil {
		authOpts = append(authOpts, docker.WithAuthCreds(creds))
	}
	hosts := docker.ConfigureDefaultRegistries(docker.WithPlainHTTP(docker.MatchLocalhost), docker.WithClient(client),
		docker.WithAuthorizer(docker.NewDockerAuthorizer(authOpts...)))
	return docker.NewResolver(docker.ResolverOptions{Hosts: hosts})
}

// authFor reads a registry's credentials from a docker config.json
// ({"auths": {"host": {"auth": base64("user:pass")}}}). It is read at each
// pull, so an updated file needs no restart.
func authFor(file, host string) (string, string, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return "", "", fmt.Errorf("registry credentials: %w", err)
	}
	var cfg struct {
		Auths map[string]struct {
			Auth     string `json:"auth"`
			Username string `json:"username"`
			Password string `json:"password"`
		} `json:"auths"`
	}
	if err := json.Unmarshal(data, &cfg); err != nil {
		return "", "", fmt.Errorf("registry credentials %s: %w", file, err)
	}
	for _, key := range []string{host, "https://" + host, "https://" + host + "/v1/", "http://" + host} {
		a, ok := cfg.Auths[key]
		if !ok && host == "registry-1.docker.io" {
			a, ok = cfg.Auths["https://index.docker.io/v1/"]
		}
		if !ok {
			continue
		}
		if a.Auth != "" {
			dec, err := base64.StdEncoding.DecodeString(a.Auth)
			if err != nil {
				return "", "", fmt.Errorf("registry credentials %s: auth of %s: %w", file, key, err)
			}
			user, pass, _ := strings.Cut(string(dec), ":")
			return user, pass, nil
		}
		return a.Username, a.Password, nil
	}
	return "", "", nil
}

// Images lists the images in podvisor's namespace.
func (p *Plugin) Images(_ pluginapi.Empty, reply *pluginapi.ImagesReply) error {
	ctx := p.ctx()
	imgs, used, err := p.imagesInUse(ctx)
	if err != nil {
		return err
	}
	for _, img := range imgs {
		size, _ := img.Size(ctx)
		reply.Images = append(reply.Images, pluginapi.Image{Name: img.Name(), Digest: img.Target().Digest.String(),
			Size: size, CreatedAt: img.Metadata().CreatedAt, InUse: used[img.Name()], Origin: img.Labels()[labelOrigin]})
	}
	sort.Slice(reply.Images, func(i, j int) bool { return reply.Images[i].Name < reply.Images[j].Name })
	return nil
}

// imagesInUse lists the images and which of them a container uses.
func (p *Plugin) imagesInUse(ctx context.Context) ([]ctrd.Image, map[string]bool, error) {
	imgs, err := p.client.ListImages(ctx)
	if err != nil {
		return nil, nil, err
	}
	used, err := p.usedImages(ctx)
	return imgs, used, err
}

func (p *Plugin) usedImages(ctx context.Context) (map[string]bool, error) {
	cs, err := p.client.ContainerService().List(ctx)
	if err != nil {
		return nil, err
	}
	used := map[string]bool{}
	for _, c := range cs {
		used[c.Image] = true
	}
	return used, nil
}

// Import loads an OCI or docker-archive tarball and unpacks its images.
// Images named in the archive keep their (normalized) names; an OCI
// archive naming only a tag is stored as import.local/<file>:<tag>, and an
// unnamed one as import.local/<file>@<digest>.
func (p *Plugin) Import(args pluginapi.ImportArgs, reply *pluginapi.ImportReply) error {
	ctx := p.ctx()
	f, err := os.Open(args.Path)
	if err != nil {
		return err
	}
	defer f.Close()
	base := "import.local/" + archiveName(args.Path)
	// Not while a pull for a hub pod may replace what it changes.
	defer p.gate.startImport()()
	now := time.Now().UTC().Format(time.RFC3339Nano)
	imgs, err := p.client.Import(ctx, f,
		// Whatever the name held before (a pull for a hub pod), it is a
		// side-loaded image now; and a fresh one, not collected at once.
		ctrd.WithImageLabels(map[string]string{labelOrigin: originImport, labelLastUsed: now}),
		ctrd.WithImageRefTranslator(func(name string) string {
			if strings.ContainsAny(name, "/:@") {
				if ref, err := NormalizeImage(name); err == nil {
					return ref
				}
			}
			return base + ":" + name
		}),
		ctrd.WithDigestRef(archive.DigestTranslator(base)),
		ctrd.WithSkipDigestRef(func(name string) bool { return name != "" }),
	)
	if err != nil {
		return fmt.Errorf("importing %s: %w", args.Path, err)
	}
	for _, i := range imgs {
		img := ctrd.NewImage(p.client, i)
		if err := p.unpack(ctx, img); err != nil {
			return fmt.Errorf("importing %s: %w", args.Path, err)
		}
		reply.Names = append(reply.Names, i.Name)
	}
	if len(imgs) == 0 {
		return fmt.Errorf("importing %s: the archive holds no image", args.Path)
	}
	return nil
}

// archiveName is a tarball's name as a valid repository path component.
func archiveName(path string) string {
	name := strings.ToLower(filepath.Base(path))
	for _, ext := range []string{".tar.gz", ".tgz", ".tar", ".oci"} {
		name = strings.TrimSuffix(name, ext)
	}
	var b strings.Builder
	for _, r := range name {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		} else if b.Len() > 0 {
			b.WriteByte('-')
		}
	}
	if s := strings.Trim(b.String(), "-"); s != "" {
		return s
	}
	return "image"
}

// RemoveImage deletes an image that no container uses.
func (p *Plugin) RemoveImage(args pluginapi.NameArgs, _ *pluginapi.Empty) error {
	ctx := p.ctx()
	ref := args.Name
	if _, err := p.client.ImageService().Get(ctx, ref); errdefs.IsNotFound(err) {
		if norm, nerr := NormalizeImage(ref); nerr == nil {
			ref = norm
		}
	}
	used, err := p.usedImages(ctx)
	if err != nil {
		return err
	}
	if used[ref] {
		return fmt.Errorf("image %s is used by a container", ref)
	}
	p.images.drop(ref)
	err = p.client.ImageService().Delete(ctx, ref, images.SynchronousDelete())
	if errdefs.IsNotFound(err) {
		return fmt.Errorf("image %s not found", args.Name)
	}
	return err
}

// labelLastUsed records when a container was last created from an image:
// containerd does not, and garbage collection removes the least recently
// used images first, as the kubelet does.
const labelLastUsed = "io.podvisor.last-used"

// touchImage records an image's use.
func (p *Plugin) touchImage(ctx context.Context, img ctrd.Image) {
	meta := img.Metadata()
	if meta.Labels == nil {
		meta.Labels = map[string]string{}
	}
	meta.Labels[labelLastUsed] = time.Now().UTC().Format(time.RFC3339Nano)
	if _, err := p.client.ImageService().Update(ctx, meta, "labels."+labelLastUsed); err != nil {
		p.log.Warn("recording an image's use", "image", img.Name(), "err", err)
	}
}

// PruneImages removes images no container uses, least recently used
// first, until about Bytes are freed (their content's size), or all of
// them with All.
func (p *Plugin) PruneImages(args pluginapi.PruneArgs, reply *pluginapi.PruneReply) error {
	ctx := p.ctx()
	imgs, used, err := p.imagesInUse(ctx)
	if err != nil {
		return err
	}
	lastUsed := func(img ctrd.Image) time.Time {
		if t, err := time.Parse(time.RFC3339Nano, img.Labels()[labelLastUsed]); err == nil {
			return t
		}
		return img.Metadata().CreatedAt
	}
	sort.Slice(imgs, func(i, j int) bool { return lastUsed(imgs[i]).Before(lastUsed(imgs[j])) })
	for _, img := range imgs {
		if !args.All && reply.Freed >= args.Bytes {
			break
		}
		if used[img.Name()] || time.Since(lastUsed(img)) < args.MinAge {
			continue
		}
		size, _ := img.Size(ctx)
		p.images.drop(img.Name())
		if err := p.client.ImageService().Delete(ctx, img.Name(), images.SynchronousDelete()); err != nil && !errdefs.IsNotFound(err) {
			return fmt.Errorf("removing image %s: %w", img.Name(), err)
		}
		reply.Removed = append(reply.Removed, img.Name())
		reply.Freed += size
	}
	return nil
}

// imageRef is a container's imageID as containerd's CRI reports it
// (ContainerStatus.ImageRef): the image's repo digest, its repository
// and the digest it was pulled or imported by
// (docker.io/library/busybox@sha256:…), else the digest of its config
// (sha256:…).
func imageRef(ctx context.Context, img ctrd.Image) string {
	if named, err := reference.ParseNormalizedNamed(img.Name()); err == nil && img.Target().Digest != "" &&
		!strings.HasPrefix(img.Name(), "sha256:") {
		return named.Name() + "@" + img.Target().Digest.String()
	}
	if cfg, err := img.Config(ctx); err == nil {
		return cfg.Digest.String()
	}
	return ""
}
