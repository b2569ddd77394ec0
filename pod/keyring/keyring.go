// Package keyring is the kubelet's credential keyring for a pod's
// imagePullSecrets (pkg/credentialprovider and its secrets package): the
// registry logins of kubernetes.io/dockerconfigjson and
// kubernetes.io/dockercfg Secrets, and which of them an image is pulled
// with. It is pure: the Secrets come through an objects.Getter.
package keyring

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/distribution/reference"
	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/pod/objects"
)

// Credential is one registry login. It prints as [redacted] however it is
// formatted or logged: a Secret's data never reaches a log or an error.
type Credential struct {
	Username, Password string
}

const redacted = "[redacted]"

// MarshalJSON redacts too: a JSON log handler marshals what it logs.
func (Credential) MarshalJSON() ([]byte, error) { return []byte(`"` + redacted + `"`), nil }

func (Credential) String() string               { return redacted }
func (Credential) GoString() string             { return redacted }
func (Credential) LogValue() slog.Value         { return slog.StringValue(redacted) }
func (c Credential) Format(f fmt.State, _ rune) { f.Write([]byte(redacted)) }

// Keyring holds the logins of a pod's pull secrets, indexed by the
// registry location each was given for (host, or host and path), most
// specific first, as the kubelet's BasicDockerKeyring does.
type Keyring struct {
	index []string
	creds map[string][]Credential
}

// New reads the logins of the pull secrets, in order. Secrets of another
// type, or without their key, are skipped, as the kubelet skips them; a
// malformed one is an error naming the secret and key, never its data.
func New(secrets []*objects.Object) (*Keyring, error) {
	k := &Keyring{creds: map[string][]Credential{}}
	for _, s := range secrets {
		if data := s.Data[v1.DockerConfigJsonKey]; s.Type == v1.SecretTypeDockerConfigJson && len(data) > 0 {
			var cfg struct {
				Auths map[string]entry `json:"auths"`
			}
			if err := json.Unmarshal(data, &cfg); err != nil {
				return nil, fmt.Errorf("image pull secret %q: %s: %w", s.Name, v1.DockerConfigJsonKey, safe(err))
			}
			k.add(cfg.Auths)
		} else if data := s.Data[v1.DockerConfigKey]; s.Type == v1.SecretTypeDockercfg && len(data) > 0 {
			var cfg map[string]entry
			if err := json.Unmarshal(data, &cfg); err != nil {
				return nil, fmt.Errorf("image pull secret %q: %s: %w", s.Name, v1.DockerConfigKey, safe(err))
			}
			k.add(cfg)
		}
	}
	return k, nil
}

// safe is a decoding error without the input it quotes: a JSON syntax
// error names the offending character, which is the Secret's data.
func safe(err error) error {
	var syntax *json.SyntaxError
	if errors.As(err, &syntax) {
		return fmt.Errorf("invalid JSON at offset %d", syntax.Offset)
	}
	return err
}

// entry is a docker config's login for one location: "auth" is
// base64(username:password) and, when set, wins over username and
// password.
type entry Credential

func (e *entry) UnmarshalJSON(data []byte) error {
	var raw struct {
		Username string `json:"username,omitempty"`
		Password string `json:"password,omitempty"`
		Auth     string `json:"auth,omitempty"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return err
	}
	e.Username, e.Password = raw.Username, raw.Password
	if raw.Auth == "" {
		return nil
	}
	var err error
	e.Username, e.Password, err = decodeAuth(raw.Auth)
	return err
}

// decodeAuth decodes an "auth" field, padded or not, as the kubelet does.
func decodeAuth(field string) (string, string, error) {
	enc := base64.RawStdEncoding
	if strings.HasSuffix(strings.TrimSpace(field), "=") {
		enc = base64.StdEncoding
	}
	decoded, err := enc.DecodeString(field)
	if err != nil {
		return "", "", err
	}
	user, pass, ok := strings.Cut(string(decoded), ":")
	if !ok {
		return "", "", errors.New("unable to parse auth field, must be formatted as base64(username:password)")
	}
	return user, pass, nil
}

// add indexes a config's logins. A location may carry a scheme and a
// /v1/ or /v2/ path, which mean the host alone, as Docker's
// ResolveAuthConfig reads them.
func (k *Keyring) add(cfg map[string]entry) {
	// A map's order is random: the locations are added sorted, so that
	// two logins of one location keep one order.
	locs := make([]string, 0, len(cfg))
	for loc := range cfg {
		locs = append(locs, loc)
	}
	sort.Strings(locs)
	for _, loc := range locs {
		value := loc
		if !strings.HasPrefix(value, "https://") && !strings.HasPrefix(value, "http://") {
			value = "https://" + value
		}
		parsed, err := url.Parse(value)
		if err != nil {
			continue // the kubelet ignores an invalid entry
		}
		path := parsed.Path
		if strings.HasPrefix(path, "/v2/") || strings.HasPrefix(path, "/v1/") {
			path = path[3:]
		}
		key := parsed.Host
		if path != "" && path != "/" {
			key += path
		}
		k.creds[key] = append(k.creds[key], Credential(cfg[loc]))
		if !slices.Contains(k.index, key) {
			k.index = append(k.index, key)
		}
	}
	// Reverse-sorted, so that a location with a path comes before its
	// host: quay.io/coreos before quay.io.
	sort.Sort(sort.Reverse(sort.StringSlice(k.index)))
}

// defaultRegistryHost is the key Docker Hub's logins are stored under
// (https://index.docker.io/v1/ and index.docker.io both become it).
const defaultRegistryHost = "index.docker.io"

// Lookup returns the logins to try, in order, for pulling image (a pod's
// image: "busybox", "registry:5000/team/app:1", "repo@sha256:…"); none
// means an anonymous pull. Every location that matches contributes, the
// most specific first; Docker Hub's logins serve images of Docker Hub
// when no location matched.
func (k *Keyring) Lookup(image string) []Credential {
	named, err := reference.ParseNormalizedNamed(image)
	if err != nil {
		return nil
	}
	repo := named.Name() // docker.io/library/busybox
	var out []Credential
	for _, key := range k.index {
		if matchLocation(key, repo) {
			out = append(out, k.creds[key]...)
		}
	}
	if len(out) > 0 {
		return out
	}
	if isDockerHub(repo) {
		return k.creds[defaultRegistryHost]
	}
	return nil
}

// isDockerHub says whether a repository is pulled from Docker Hub, by the
// kubelet's test of its name.
func isDockerHub(repo string) bool {
	first, _, found := strings.Cut(repo, "/")
	if first == "" {
		return false
	}
	if !found || first == "docker.io" || first == "index.docker.io" {
		return true
	}
	return !strings.ContainsAny(first, ".:")
}

// matchLocation says whether a login's location (host[:port][/path], the
// host possibly with wildcards, *.example.com) covers a repository: the
// same port, as many host labels each matching its pattern, and the
// location's path a prefix of the repository's.
func matchLocation(location, repo string) bool {
	glob, err := url.Parse("https://" + location)
	if err != nil {
		return false
	}
	target, err := url.Parse("https://" + repo)
	if err != nil {
		return false
	}
	globParts, globPort := splitHost(glob.Host)
	targetParts, targetPort := splitHost(target.Host)
	if globPort != targetPort || len(globParts) != len(targetParts) || !strings.HasPrefix(target.Path, glob.Path) {
		return false
	}
	for i, pattern := range globParts {
		if ok, err := filepath.Match(pattern, targetParts[i]); err != nil || !ok {
			return false
		}
	}
	return true
}

func splitHost(hostport string) ([]string, string) {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		host, port = hostport, ""
	}
	return strings.Split(host, "."), port
}

// MissingReason is the kubelet's event when some pull secrets of a pod
// cannot be read; the pull goes on without them.
const MissingReason = "FailedToRetrieveImagePullSecret"

// MissingMessage is that event's message for the secrets named.
func MissingMessage(names []string) string {
	return fmt.Sprintf("Unable to retrieve some image pull secrets (%s); attempting to pull the image may not succeed.", strings.Join(names, ", "))
}

// PullSecrets gets a pod's imagePullSecrets in order, as the kubelet's
// getPullSecretsForPod does: entries without a name are ignored, and
// those get cannot give (none without a getter) are missing.
func PullSecrets(pod *v1.Pod, get objects.Getter) (found []*objects.Object, missing []string) {
	for _, ref := range pod.Spec.ImagePullSecrets {
		if ref.Name == "" {
			continue
		}
		var s *objects.Object
		err := errors.New("no objects")
		if get != nil {
			s, err = get.Get(objects.Ref{Kind: objects.Secret, Namespace: pod.Namespace, Name: ref.Name})
		}
		if err != nil || s == nil {
			missing = append(missing, ref.Name)
			continue
		}
		found = append(found, s)
	}
	return found, missing
}
