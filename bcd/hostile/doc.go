// Package hostile holds the hostile-gateway suite: a test gateway that
// speaks the real session protocol (bc.agent.v1.Session over gRPC with
// mTLS, certificates from a CA the test makes) to the real bcd binary, with
// a real plugin subprocess that records every run, and a real signing
// authority (roots, 24-hour worker keys, signed trust bundles) made in the
// test. The spec's promise is that a gateway "can delay, drop or read
// frames but should never forge intent or results"; each subtest is one
// forgery the node must refuse, with the spec's code, journaled where the
// spec says so, and with nothing run. The package has tests only.
package hostile
