// Package replicas tests several real podhub serve processes on one
// PostgreSQL store (test/pgtest): one leader at a time, the takeover
// after a kill -9 and the hand-off at SIGTERM, measured, and a workload
// applied through any replica scheduled once. Its tests only.
package replicas
