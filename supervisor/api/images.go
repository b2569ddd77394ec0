package api

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"

	"github.com/podvisor/podvisor/supervisor/runtime"
)

// Images and exec:
//
//	GET /v1/images                              ImageList
//	POST /v1/images/import {"path": FILE}       ImportResult (FILE is on the device)
//	DELETE /v1/images/{name...}
//	GET /v1/pods/{ns}/{name}/exec?container=C   ExecTarget

// ImageList is the images and the side-loaded archives that failed.
type ImageList struct {
	Images []runtime.Image `json:"images"`
	Failed []ImportFailure `json:"failed,omitempty"`
}

// ImportFailure is a side-loaded archive that could not be imported.
type ImportFailure struct {
	File  string `json:"file"`
	Error string `json:"error"`
}

// ImportResult names what an import loaded.
type ImportResult struct {
	Names []string `json:"names"`
}

// ExecTarget tells the CLI how to run a command in a container: the
// runtime's own description, sent as it is.
type ExecTarget = runtime.ExecTarget

// ImageBackend is the part of a Backend that manages images and exec.
type ImageBackend interface {
	Images() (ImageList, error)
	ImportImage(path string) ([]string, error)
	RemoveImage(name string) error
	ExecTarget(namespace, name, container string) (ExecTarget, error)
}

func (s *Server) imageRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/images", func(w http.ResponseWriter, r *http.Request) {
		list, err := s.Backend.Images()
		if err != nil {
			httpError(w, http.StatusServiceUnavailable, "%v", err)
			return
		}
		writeJSON(w, list)
	})
	mux.HandleFunc("POST /v1/images/import", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Path string `json:"path"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Path == "" {
			httpError(w, http.StatusBadRequest, "import: want {\"path\": FILE}")
			return
		}
		names, err := s.Backend.ImportImage(req.Path)
		if err != nil {
			httpError(w, http.StatusUnprocessableEntity, "%v", err)
			return
		}
		writeJSON(w, ImportResult{Names: names})
	})
	mux.HandleFunc("DELETE /v1/images/{name...}", func(w http.ResponseWriter, r *http.Request) {
		if err := s.Backend.RemoveImage(r.PathValue("name")); err != nil {
			httpError(w, http.StatusConflict, "%v", err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /v1/pods/{ns}/{name}/exec", func(w http.ResponseWriter, r *http.Request) {
		t, err := s.Backend.ExecTarget(r.PathValue("ns"), r.PathValue("name"), r.URL.Query().Get("container"))
		if err != nil {
			httpError(w, http.StatusNotFound, "%v", err)
			return
		}
		writeJSON(w, t)
	})
}

// Images lists images and failed side-loads.
func (c *Client) Images(ctx context.Context) (ImageList, error) {
	var l ImageList
	return l, c.getJSON(ctx, "/v1/images", nil, &l)
}

// ImportImage imports an archive that is on the device.
func (c *Client) ImportImage(ctx context.Context, path string) ([]string, error) {
	body, _ := json.Marshal(map[string]string{"path": path})
	resp, err := c.do(ctx, http.MethodPost, "/v1/images/import", nil, strings.NewReader(string(body)))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var res ImportResult
	return res.Names, json.NewDecoder(resp.Body).Decode(&res)
}

// RemoveImage deletes an unused image.
func (c *Client) RemoveImage(ctx context.Context, name string) error {
	resp, err := c.do(ctx, http.MethodDelete, "/v1/images/"+name, nil, nil)
	if err != nil {
		return err
	}
	return resp.Body.Close()
}

// ExecTarget asks how to run a command in a pod's container.
func (c *Client) ExecTarget(ctx context.Context, namespace, name, container string) (ExecTarget, error) {
	var t ExecTarget
	q := url.Values{}
	if container != "" {
		q.Set("container", container)
	}
	return t, c.getJSON(ctx, "/v1/pods/"+url.PathEscape(namespace)+"/"+url.PathEscape(name)+"/exec", q, &t)
}
