// Package testenv gives integration tests the addresses of the real servers
// scripts/testservers.sh starts. A test asks for a server by env var; when
// the variable is unset the test is skipped, unless CUBE_TEST_REQUIRE_SERVERS=1
// (CI sets it), in which case a missing server fails the test.
package testenv

import (
	"os"
	"os/exec"
	"testing"
)

// Names of the variables scripts/testservers.sh exports.
const (
	MySQLDSN    = "CUBE_TEST_MYSQL_DSN"
	PostgresDSN = "CUBE_TEST_POSTGRES_DSN"
	RedisAddr   = "CUBE_TEST_REDIS_ADDR"
	Registry    = "CUBE_TEST_REGISTRY"
	S3Endpoint  = "CUBE_TEST_S3_ENDPOINT"
	S3Bucket    = "CUBE_TEST_S3_BUCKET"
	S3AccessKey = "CUBE_TEST_S3_ACCESS_KEY"
	S3SecretKey = "CUBE_TEST_S3_SECRET_KEY"
	// GCSEndpoint is fake-gcs-server's base URL (http://127.0.0.1:port);
	// GCSBucket is a bucket that exists there.
	GCSEndpoint = "CUBE_TEST_GCS_ENDPOINT"
	GCSBucket   = "CUBE_TEST_GCS_BUCKET"
	RequireFlag = "CUBE_TEST_REQUIRE_SERVERS"
)

// Required reports whether missing servers must fail tests.
func Required() bool { return os.Getenv(RequireFlag) == "1" }

// Get returns the value of the variable name, skipping the test (or failing
// it when servers are required) if it is unset.
func Get(t testing.TB, name string) string {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		missing(t, "server variable "+name+" is not set (run scripts/testservers.sh start and source its env file)")
	}
	return v
}

// Tool returns the path of an external program the test needs (mkfs.ext4,
// debugfs, umoci...), skipping or failing like Get when it is absent.
func Tool(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		missing(t, "tool "+name+" is not on PATH")
	}
	return p
}

func missing(t testing.TB, what string) {
	t.Helper()
	if Required() {
		t.Fatalf("%s, and %s=1", what, RequireFlag)
	}
	t.Skip(what)
}
