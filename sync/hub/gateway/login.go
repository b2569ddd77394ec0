package gateway

import (
	"html/template"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// The dashboard's login: a form that takes a token and sets a session
// cookie; and its logout.
const (
	loginPath     = "/ui/login"
	logoutPath    = "/ui/logout"
	sessionCookie = "podhub_session"
	maxLoginForm  = 4 << 10
)

var loginPage = template.Must(template.New("login").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width">
<title>podhub — log in</title>
<style>body{font:16px system-ui,sans-serif;max-width:28em;margin:4em auto;padding:0 1em}
input{font:inherit;width:100%;box-sizing:border-box;margin:.3em 0 1em;padding:.4em}
button{font:inherit;padding:.4em 1.2em}.err{color:#b00020}</style></head>
<body><h1>podhub</h1>
{{if .Error}}<p class="err" role="alert">{{.Error}}</p>{{end}}
<form method="post" action="/ui/login">
<label for="token">Token (<code>podhub token create NAME</code>)</label>
<input id="token" name="token" type="password" autocomplete="current-password" required autofocus>
<input type="hidden" name="next" value="{{.Next}}">
<button type="submit">Log in</button>
</form>
<p>A client certificate from <code>podhub user add</code> logs in without a token.</p>
</body></html>
`))

type loginData struct{ Error, Next string }

// login shows the form (GET) or checks its token and starts a session
// (POST). Someone already in (a user's client certificate, a live
// session) goes on to the dashboard.
func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	next := safeNext(r.URL.Query().Get("next"))
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		if _, ref := s.authenticate(r); ref == nil {
			http.Redirect(w, r, next, http.StatusFound)
			return
		}
		s.loginForm(w, http.StatusOK, "", next)
	case http.MethodPost:
		s.loginPost(w, r)
	default:
		w.Header().Set("Allow", "GET, HEAD, POST")
		writeStatus(w, http.StatusMethodNotAllowed, "MethodNotAllowed", "the server does not allow this method on the requested resource")
	}
}

func (s *Server) loginPost(w http.ResponseWriter, r *http.Request) {
	// A form posted from another site is refused (SameSite covers the
	// cookie; this covers the login itself).
	if o := r.Header.Get("Origin"); o != "" && o != "https://"+r.Host {
		writeStatus(w, http.StatusForbidden, "Forbidden", "login from another origin")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxLoginForm)
	if err := r.ParseForm(); err != nil {
		s.loginForm(w, http.StatusBadRequest, "The form could not be read.", loginPath)
		return
	}
	next := safeNext(r.PostForm.Get("next"))
	user, sum, ref := s.checkToken(remoteIP(r), strings.TrimSpace(r.PostForm.Get("token")))
	if ref != nil {
		s.noteRefusal(r, ref)
		if ref.code == http.StatusTooManyRequests {
			w.Header().Set("Retry-After", "60")
			s.loginForm(w, http.StatusTooManyRequests, "Too many failed logins from your address; wait a minute.", next)
			return
		}
		s.loginForm(w, http.StatusUnauthorized, "That token is not valid.", next)
		return
	}
	id, err := s.sessions.start(user, sum, s.now())
	if err != nil {
		writeStatus(w, http.StatusInternalServerError, "InternalError", "starting a session: "+err.Error())
		return
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: id, Path: "/", MaxAge: int(s.cfg.SessionTTL / time.Second),
		HttpOnly: true, Secure: true, SameSite: http.SameSiteStrictMode})
	s.log.Info("dashboard login", "user", user, "remote", r.RemoteAddr)
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (s *Server) loginForm(w http.ResponseWriter, code int, msg, next string) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'")
	h.Set("X-Frame-Options", "DENY")
	w.WriteHeader(code)
	loginPage.Execute(w, loginData{Error: msg, Next: next})
}

// logout ends the session and clears the cookie.
func (s *Server) logout(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodPost {
		w.Header().Set("Allow", "GET, POST")
		writeStatus(w, http.StatusMethodNotAllowed, "MethodNotAllowed", "the server does not allow this method on the requested resource")
		return
	}
	if c, err := r.Cookie(sessionCookie); err == nil {
		s.sessions.end(c.Value)
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: "/", MaxAge: -1,
		HttpOnly: true, Secure: true, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, loginPath, http.StatusSeeOther)
}

// safeNext is where to go after the login: a dashboard path of this
// server, never another site.
func safeNext(next string) string {
	u, err := url.Parse(next)
	if err != nil || next == "" || u.Scheme != "" || u.Host != "" || !strings.HasPrefix(u.Path, "/ui/") ||
		strings.HasPrefix(next, "//") || strings.ContainsAny(next, "\\\r\n") || u.Path == loginPath || u.Path == logoutPath {
		return "/ui/"
	}
	return u.RequestURI()
}
