package gateway

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"sync"
	"time"
)

// sessions are the dashboard's logins, held in memory only (a restart
// logs everyone out): the cookie carries a random ID, the server keeps
// who it is and which token it came from, so deleting the token ends the
// session too.
type sessions struct {
	ttl time.Duration
	max int

	mu   sync.Mutex
	byID map[[sha256.Size]byte]session // keyed by the ID's hash: the map holds no cookie
}

type session struct {
	user    string
	token   [sha256.Size]byte // the hash of the token logged in with
	expires time.Time
}

func newSessions(ttl time.Duration, max int) *sessions {
	return &sessions{ttl: ttl, max: max, byID: map[[sha256.Size]byte]session{}}
}

// start makes a session for user and returns its cookie value.
func (s *sessions) start(user string, token [sha256.Size]byte, now time.Time) (string, error) {
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return "", err
	}
	id := base64.RawURLEncoding.EncodeToString(raw)
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.byID) >= s.max {
		s.prune(now)
	}
	s.byID[sha256.Sum256([]byte(id))] = session{user: user, token: token, expires: now.Add(s.ttl)}
	return id, nil
}

// get is the live session of a cookie value.
func (s *sessions) get(id string, now time.Time) (session, bool) {
	if len(id) > 64 {
		return session{}, false
	}
	key := sha256.Sum256([]byte(id))
	s.mu.Lock()
	defer s.mu.Unlock()
	se, ok := s.byID[key]
	if ok && !now.Before(se.expires) {
		delete(s.byID, key)
		return session{}, false
	}
	return se, ok
}

// end forgets a session (logout).
func (s *sessions) end(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.byID, sha256.Sum256([]byte(id)))
}

// prune drops expired sessions and, if still full, the one ending first.
func (s *sessions) prune(now time.Time) {
	var first [sha256.Size]byte
	var firstEnd time.Time
	for k, se := range s.byID {
		if !now.Before(se.expires) {
			delete(s.byID, k)
		} else if firstEnd.IsZero() || se.expires.Before(firstEnd) {
			first, firstEnd = k, se.expires
		}
	}
	if len(s.byID) >= s.max && !firstEnd.IsZero() {
		delete(s.byID, first)
	}
}
