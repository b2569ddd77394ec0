package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"strings"
	"time"

	"github.com/podvisor/podvisor/sync/hub/fleetdb"
	"github.com/podvisor/podvisor/sync/hub/releases"
	"github.com/podvisor/podvisor/sync/hub/updates"
	"github.com/podvisor/podvisor/sync/protocol"
)

// ReleaseInfo is a stored release as the API shows it.
type ReleaseInfo struct {
	Kind       string              `json:"kind"`
	Name       string              `json:"name"`
	Version    string              `json:"version"`
	KeyID      string              `json:"keyId"`
	Created    time.Time           `json:"created"`
	Compatible string              `json:"compatible,omitempty"`
	Artifacts  []protocol.Artifact `json:"artifacts"`
	// UsedBy are the updates that rolled it out (the active ones keep it).
	UsedBy []string `json:"usedBy,omitempty"`
}

// UpdateInfo is an update's spec and status.
type UpdateInfo struct {
	Spec   updates.Spec   `json:"spec"`
	Status updates.Status `json:"status"`
	Active bool           `json:"active"`
}

// Upload parts of POST /v1/releases, in this order: the signed manifest,
// the release key's public half when it is not the hub's, then one
// "blob" part per transfer hash (its file name), the bytes as they travel.
const (
	PartManifest = "manifest"
	PartKey      = "key"
	PartBlob     = "blob"
)

func (a *API) releaseRoutes(mux *http.ServeMux) {
	mux.HandleFunc("POST /v1/releases", func(w http.ResponseWriter, r *http.Request) {
		out, err := a.pushRelease(r)
		reply(w, out, err)
	})
	mux.HandleFunc("GET /v1/releases", func(w http.ResponseWriter, r *http.Request) {
		out, err := a.releaseList("", "")
		reply(w, out, err)
	})
	mux.HandleFunc("GET /v1/releases/{name}/{version}", func(w http.ResponseWriter, r *http.Request) {
		out, err := a.releaseList(r.PathValue("name"), r.PathValue("version"))
		if err == nil && len(out) == 0 {
			err = fmt.Errorf("release %s %s: %w", r.PathValue("name"), r.PathValue("version"), fleetdb.ErrNotFound)
		}
		if err != nil {
			reply(w, nil, err)
			return
		}
		reply(w, out[0], nil)
	})
	mux.HandleFunc("DELETE /v1/releases/{name}/{version}", func(w http.ResponseWriter, r *http.Request) {
		a.releasing.Lock()
		defer a.releasing.Unlock()
		left, err := a.Fleet.DeleteRelease(r.PathValue("name"), r.PathValue("version"))
		if err == nil {
			err = a.Releases.Prune(left)
		}
		reply(w, map[string]string{}, err)
	})
	mux.HandleFunc("POST /v1/updates", func(w http.ResponseWriter, r *http.Request) {
		var req updates.Request
		if err := decodeBody(r, &req); err != nil {
			reply(w, nil, err)
			return
		}
		spec, err := a.Updates.Create(req)
		reply(w, spec, err)
	})
	mux.HandleFunc("GET /v1/updates", func(w http.ResponseWriter, r *http.Request) {
		us, err := a.Fleet.Updates(false)
		reply(w, updateInfos(us), err)
	})
	mux.HandleFunc("GET /v1/updates/{name}", func(w http.ResponseWriter, r *http.Request) {
		u, err := a.Fleet.Update(r.PathValue("name"))
		if err != nil {
			reply(w, nil, err)
			return
		}
		reply(w, updateInfos([]fleetdb.StoredUpdate{u})[0], nil)
	})
	mux.HandleFunc("POST /v1/updates/{name}/{verb}", func(w http.ResponseWriter, r *http.Request) {
		st, err := a.Updates.Change(r.PathValue("name"), r.PathValue("verb"))
		reply(w, st, err)
	})
}

func updateInfos(us []fleetdb.StoredUpdate) []UpdateInfo {
	out := make([]UpdateInfo, 0, len(us))
	for _, u := range us {
		var i UpdateInfo
		json.Unmarshal(u.Spec, &i.Spec)
		json.Unmarshal(u.Status, &i.Status)
		i.Active = u.Active
		out = append(out, i)
	}
	return out
}

func (a *API) releaseList(name, version string) ([]ReleaseInfo, error) {
	var stored []fleetdb.StoredRelease
	if name != "" {
		r, err := a.Fleet.Release(name, version)
		if err != nil {
			return nil, err
		}
		stored = append(stored, r)
	} else {
		var err error
		if stored, err = a.Fleet.Releases(); err != nil {
			return nil, err
		}
	}
	us, err := a.Fleet.Updates(false)
	if err != nil {
		return nil, err
	}
	out := make([]ReleaseInfo, 0, len(stored))
	for _, s := range stored {
		r, err := releases.Decode(s.Manifest)
		if err != nil {
			return nil, err
		}
		info := ReleaseInfo{Kind: s.Kind, Name: s.Name, Version: s.Version, KeyID: s.KeyID, Created: s.Created, Compatible: r.Compatible, Artifacts: r.Artifacts}
		for _, u := range updateInfos(us) {
			if u.Spec.Release == s.Name && u.Spec.Version == s.Version {
				info.UsedBy = append(info.UsedBy, u.Spec.Name)
			}
		}
		out = append(out, info)
	}
	return out, nil
}

// pushRelease stores a pushed release: its manifest must verify with the
// hub's key (or the release key sent with it), and every artifact's
// bytes arrive as the manifest says (streamed to disk, each bounded by
// its size in the manifest, checked against its hash).
func (a *API) pushRelease(r *http.Request) (ReleaseInfo, error) {
	mr, err := r.MultipartReader()
	if err != nil {
		return ReleaseInfo{}, fmt.Errorf("release push: %w", err)
	}
	part, err := mr.NextPart()
	if err != nil || part.FormName() != PartManifest {
		return ReleaseInfo{}, errors.New("release push: the first part must be the signed manifest")
	}
	manifest, err := readPart(part, protocol.MaxMessageBytes)
	if err != nil {
		return ReleaseInfo{}, err
	}
	key := a.HubKey
	part, err = mr.NextPart()
	if err == nil && part.FormName() == PartKey {
		pem, perr := readPart(part, 4<<10)
		if perr != nil {
			return ReleaseInfo{}, perr
		}
		if key, perr = protocol.ParsePublicKey(pem); perr != nil {
			return ReleaseInfo{}, fmt.Errorf("release push: the release key: %w", perr)
		}
		part, err = mr.NextPart()
	}
	rel, err2 := protocol.OpenRelease(manifest, key)
	if err2 != nil {
		return ReleaseInfo{}, fmt.Errorf("release push: %w", err2)
	}
	if rel.Kind == protocol.ReleaseAgent && rel.Name != "podvisor" {
		return ReleaseInfo{}, fmt.Errorf("release push: an agent release is named podvisor, not %q", rel.Name)
	}
	if _, err := a.Fleet.Release(rel.Name, rel.Version); err == nil {
		return ReleaseInfo{}, fmt.Errorf("release %s %s: %w (podhub delete release first)", rel.Name, rel.Version, fleetdb.ErrReleaseExists)
	}
	a.releasing.Lock()
	defer a.releasing.Unlock()
	want := map[string]int64{}
	for _, art := range rel.Artifacts {
		sha, size := art.Transfer()
		want[sha] = size
	}
	var need int64 // up to 64 × 2 GiB: checked before a byte is written
	for sha, size := range want {
		if !a.Releases.Has(sha, size) {
			need += size
		}
	}
	if err := a.Releases.Room(need); err != nil {
		return ReleaseInfo{}, fmt.Errorf("release push: %w", err)
	}
	for ; err == nil; part, err = mr.NextPart() {
		sha := part.FileName()
		size, ok := want[sha]
		if part.FormName() != PartBlob || !ok {
			return ReleaseInfo{}, fmt.Errorf("release push: part %q %q is no artifact of the manifest still to send", part.FormName(), sha)
		}
		if err := a.Releases.Put(sha, size, part); err != nil {
			return ReleaseInfo{}, fmt.Errorf("release push: %w", err)
		}
		delete(want, sha)
	}
	if !errors.Is(err, io.EOF) {
		return ReleaseInfo{}, fmt.Errorf("release push: %w", err)
	}
	var missing []string
	for sha, size := range want {
		if !a.Releases.Has(sha, size) {
			missing = append(missing, sha)
		}
	}
	if len(missing) > 0 {
		return ReleaseInfo{}, fmt.Errorf("release push: artifacts not sent: %s", strings.Join(missing, ", "))
	}
	for _, art := range rel.Artifacts {
		if err := a.Releases.CheckDecoded(art); err != nil {
			return ReleaseInfo{}, fmt.Errorf("release push: %w", err)
		}
	}
	stored := fleetdb.StoredRelease{Kind: rel.Kind, Name: rel.Name, Version: rel.Version, Manifest: manifest,
		KeyID: protocol.KeyID(key), Created: a.now()}
	if err := a.Fleet.AddRelease(stored); err != nil {
		return ReleaseInfo{}, err
	}
	return ReleaseInfo{Kind: rel.Kind, Name: rel.Name, Version: rel.Version, KeyID: stored.KeyID, Created: stored.Created,
		Compatible: rel.Compatible, Artifacts: rel.Artifacts}, nil
}

// readPart reads a small part whole, refusing one over limit bytes.
func readPart(p *multipart.Part, limit int64) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(p, limit+1))
	if err != nil {
		return nil, fmt.Errorf("release push: part %s: %w", p.FormName(), err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("release push: part %s is over %d bytes", p.FormName(), limit)
	}
	return data, nil
}
