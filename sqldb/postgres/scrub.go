package postgres

// Scrub is err with every password rawURL carries (as written or
// decoded) replaced by xxxxx: for the errors of work done on a store
// after Open, whose text the caller does not control.
func Scrub(err error, rawURL string) error { return scrub(err, passwordsOf(rawURL)...) }
