package devicelink

// Connected reports whether the link's connection to the broker is open
// now (readiness: podhub's /readyz).
func (h *Link) Connected() bool {
	return h.client != nil && h.client.IsConnectionOpen()
}
