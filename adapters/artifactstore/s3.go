package artifactstore

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go/logging"
	"gocloud.dev/blob/s3blob"

	"github.com/cubesandbox/templatecenter/core"
)

// S3Config configures an S3 or S3-compatible (MinIO) store.
type S3Config struct {
	// Endpoint is "host:port" or a URL ("http://127.0.0.1:9000"); empty means
	// AWS itself. A scheme in the URL wins over UseSSL.
	Endpoint string
	Bucket   string
	// Region defaults to us-east-1.
	Region string
	// AccessKey and SecretKey are both set or both empty; empty means the
	// standard AWS chain (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, shared
	// config, instance role).
	AccessKey string
	SecretKey string
	// UsePathStyle addresses buckets as endpoint/bucket (MinIO needs it).
	UsePathStyle bool
	// UseSSL picks https for an Endpoint given without a scheme.
	UseSSL bool
	// Prefix is a directory-like key prefix ("cube/artifacts").
	Prefix string
	// PartSize is the multipart part size; 0 means DefaultPartSize (16 MiB).
	PartSize int64
}

// String describes the config without its secret, so logging a config (even
// with %v or %+v) never leaks it.
func (c S3Config) String() string {
	return fmt.Sprintf("s3 endpoint=%q bucket=%q region=%q path_style=%t ssl=%t prefix=%q credentials=%s",
		c.Endpoint, c.Bucket, c.Region, c.UsePathStyle, c.UseSSL, c.Prefix, c.credentialSource())
}

// GoString keeps %#v from printing the secret too.
func (c S3Config) GoString() string { return "artifactstore.S3Config{" + c.String() + "}" }

func (c S3Config) credentialSource() string {
	if c.AccessKey != "" {
		return "static"
	}
	return "aws-default-chain"
}

// Names of the environment variables S3ConfigFromEnv reads (shared with the
// upstream deployment).
const (
	EnvS3Endpoint     = "CUBE_S3_ENDPOINT"
	EnvS3Bucket       = "CUBE_S3_BUCKET"
	EnvS3AccessKey    = "CUBE_S3_ACCESS_KEY"
	EnvS3SecretKey    = "CUBE_S3_SECRET_KEY"
	EnvS3Region       = "CUBE_S3_REGION"
	EnvS3UsePathStyle = "CUBE_S3_USE_PATH_STYLE"
	EnvS3UseSSL       = "CUBE_S3_USE_SSL"
	EnvS3Prefix       = "CUBE_S3_ARTIFACT_PREFIX"
)

// S3ConfigFromEnv reads the CUBE_S3_* variables through getenv (os.Getenv in
// production). enabled is true only when endpoint, bucket and both keys are
// set, as upstream does. CUBE_S3_USE_SSL defaults to true and
// CUBE_S3_USE_PATH_STYLE to false; a value that is not a boolean is an error
// naming the variable.
func S3ConfigFromEnv(getenv func(string) string) (cfg S3Config, enabled bool, err error) {
	cfg = S3Config{
		Endpoint:  strings.TrimSpace(getenv(EnvS3Endpoint)),
		Bucket:    strings.TrimSpace(getenv(EnvS3Bucket)),
		AccessKey: getenv(EnvS3AccessKey),
		SecretKey: getenv(EnvS3SecretKey),
		Region:    strings.TrimSpace(getenv(EnvS3Region)),
		Prefix:    strings.TrimSpace(getenv(EnvS3Prefix)),
	}
	if cfg.UsePathStyle, err = envBool(getenv, EnvS3UsePathStyle, false); err != nil {
		return S3Config{}, false, err
	}
	if cfg.UseSSL, err = envBool(getenv, EnvS3UseSSL, true); err != nil {
		return S3Config{}, false, err
	}
	enabled = cfg.Endpoint != "" && cfg.Bucket != "" && cfg.AccessKey != "" && cfg.SecretKey != ""
	return cfg, enabled, nil
}

func envBool(getenv func(string) string, name string, def bool) (bool, error) {
	v := strings.TrimSpace(getenv(name))
	if v == "" {
		return def, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, &core.FieldError{Field: name, Reason: fmt.Sprintf("%q is not a boolean", v)}
	}
	return b, nil
}

// s3Scheme is
// s3://bucket?endpoint=host:port&region=r&use_path_style=true&disable_https=true,
// credentials from the standard AWS chain.
var s3Scheme = Scheme{Name: BackendS3, Remote: true, Parse: parseS3URL}

// s3URL is a parsed s3:// URL.
type s3URL struct{ cfg S3Config }

func (s s3URL) Open(ctx context.Context) (Driver, error) {
	bb, _, err := openS3Bucket(ctx, s.cfg)
	if err != nil {
		return nil, err
	}
	return bb, nil
}

func parseS3URL(u *url.URL, q url.Values) (Opener, error) {
	if err := noBucketPath(u); err != nil {
		return nil, err
	}
	if u.Host == "" {
		return nil, &core.FieldError{Field: "url", Reason: "s3:// needs a bucket name as host"}
	}
	cfg := S3Config{Bucket: u.Host, Endpoint: q.Get("endpoint"), Region: q.Get("region"), UseSSL: true}
	q.Del("endpoint")
	q.Del("region")
	var err error
	if cfg.UsePathStyle, err = boolParam(q, "use_path_style"); err != nil {
		return nil, err
	}
	noTLS, err := boolParam(q, "disable_https")
	if err != nil {
		return nil, err
	}
	cfg.UseSSL = !noTLS
	if noTLS && strings.HasPrefix(cfg.Endpoint, "https://") {
		return nil, &core.FieldError{Field: "url", Reason: "disable_https=true contradicts an https:// endpoint"}
	}
	return s3URL{cfg}, onlyParams(q)
}

// OpenS3 opens an S3 or S3-compatible bucket. The bucket must exist.
func OpenS3(ctx context.Context, cfg S3Config) (*Store, error) {
	bb, prefix, err := openS3Bucket(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open s3 artifact store (bucket %q): %w", cfg.Bucket, err)
	}
	return &Store{kind: BackendS3, prefix: prefix, be: bb}, nil
}

func openS3Bucket(ctx context.Context, cfg S3Config) (*bucketBackend, string, error) {
	if cfg.Bucket == "" {
		return nil, "", &core.FieldError{Field: "bucket", Reason: "must not be empty"}
	}
	if (cfg.AccessKey == "") != (cfg.SecretKey == "") {
		return nil, "", &core.FieldError{Field: "credentials", Reason: "access key and secret key must be set together"}
	}
	if cfg.PartSize < 0 || (cfg.PartSize > 0 && cfg.PartSize < 5<<20) {
		return nil, "", &core.FieldError{Field: "part size", Reason: fmt.Sprintf("%d is below S3's 5 MiB minimum", cfg.PartSize)}
	}
	prefix, err := normalizePrefix(cfg.Prefix)
	if err != nil {
		return nil, "", err
	}
	endpoint, err := endpointURL(cfg.Endpoint, cfg.UseSSL)
	if err != nil {
		return nil, "", err
	}
	region := cfg.Region
	if region == "" {
		region = "us-east-1"
	}
	loadOpts := []func(*awsconfig.LoadOptions) error{awsconfig.WithRegion(region)}
	if cfg.AccessKey != "" {
		loadOpts = append(loadOpts, awsconfig.WithCredentialsProvider(
			credentials.NewStaticCredentialsProvider(cfg.AccessKey, cfg.SecretKey, "")))
	}
	awsCfg, err := awsconfig.LoadDefaultConfig(ctx, loadOpts...)
	if err != nil {
		// The SDK's config errors name files and profiles, never secrets.
		return nil, "", fmt.Errorf("load AWS config: %w", err)
	}
	// The SDK's default logger writes to stderr (checksum notices on every
	// GET); the service reports failures through returned errors instead.
	awsCfg.Logger = logging.Nop{}
	client := s3.NewFromConfig(awsCfg, func(o *s3.Options) {
		if endpoint != "" {
			o.BaseEndpoint = aws.String(endpoint)
		}
		o.UsePathStyle = cfg.UsePathStyle
	})
	b, err := s3blob.OpenBucket(ctx, client, cfg.Bucket, &s3blob.Options{
		// The transfer manager ignores the client's setting unless told.
		RequestChecksumCalculation: awsCfg.RequestChecksumCalculation,
	})
	if err != nil {
		return nil, "", err
	}
	partSize := cfg.PartSize
	if partSize == 0 {
		partSize = DefaultPartSize
	}
	return &bucketBackend{b: b, partSize: partSize, canSign: true, s3: client}, prefix, nil
}

// endpointURL turns "host:port" or a URL into the SDK's base endpoint.
func endpointURL(endpoint string, useSSL bool) (string, error) {
	if endpoint == "" {
		return "", nil
	}
	if !strings.Contains(endpoint, "://") {
		scheme := "http"
		if useSSL {
			scheme = "https"
		}
		endpoint = scheme + "://" + endpoint
	}
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return "", &core.FieldError{Field: "endpoint", Reason: fmt.Sprintf("%q is not host:port or an http(s) URL", redactURLString(endpoint))}
	}
	if u.User != nil {
		return "", &core.FieldError{Field: "endpoint", Reason: "must not carry credentials"}
	}
	return u.String(), nil
}

// noCredentialsInURL explains why a store URL carrying secrets is refused.
const noCredentialsInURL = "credentials are not accepted in store URLs (they end up in logs); use AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or OpenS3"
