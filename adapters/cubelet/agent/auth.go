package agent

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/cubesandbox/templatecenter/adapters/cubelet"
)

// errUnauthenticated is every refusal: it says what to fix and never
// quotes what the caller sent.
var errUnauthenticated = status.Error(codes.Unauthenticated,
	"node agent: missing or wrong node credential (metadata "+cubelet.NodeTokenMetadata+"; the master's CUBE_MASTER_NODE_TOKEN must equal the agent's CUBE_NODEAGENT_TOKEN)")

// macKey keys the digests tokens are compared by; drawn per process, as the
// digests are never kept or sent.
var macKey = func() []byte {
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		panic("node agent: no randomness: " + err.Error())
	}
	return k
}()

func tokenDigest(s string) []byte {
	m := hmac.New(sha256.New, macKey)
	m.Write([]byte(s))
	return m.Sum(nil)
}

// authorized reports whether ctx carries exactly one node credential equal
// to the agent's, compared in time independent of both values.
func (a *Agent) authorized(ctx context.Context) bool {
	md, _ := metadata.FromIncomingContext(ctx)
	got := md.Get(cubelet.NodeTokenMetadata)
	presented := ""
	if len(got) == 1 {
		presented = got[0]
	}
	return hmac.Equal(tokenDigest(presented), a.tokenDigest) && len(got) == 1
}

// refuse logs a refused call (who and what, never the credential) and
// returns the error the caller gets.
func (a *Agent) refuse(ctx context.Context, method string) error {
	from := "unknown"
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		from = p.Addr.String()
	}
	a.log.Warn("call refused: missing or wrong node credential", "method", method, "peer", from)
	return errUnauthenticated
}

func (a *Agent) unaryAuth(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if !a.authorized(ctx) {
		return nil, a.refuse(ctx, info.FullMethod)
	}
	return handler(ctx, req)
}

func (a *Agent) streamAuth(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if !a.authorized(ss.Context()) {
		return a.refuse(ss.Context(), info.FullMethod)
	}
	return handler(srv, ss)
}

// NewServer returns a gRPC server that serves the Cubelet Images and
// CubeboxMgr services and refuses every call, to these and to any service
// added later (gRPC health), that lacks the node credential. opts add to
// the server's options (transport credentials, for instance); an
// interceptor among them would run before the credential check.
func (a *Agent) NewServer(opts ...grpc.ServerOption) *grpc.Server {
	opts = append(opts, grpc.ChainUnaryInterceptor(a.unaryAuth), grpc.ChainStreamInterceptor(a.streamAuth),
		// Methods the agent does not serve go through the stream check
		// too: without the credential, a caller learns nothing, not even
		// which methods exist.
		grpc.UnknownServiceHandler(func(any, grpc.ServerStream) error {
			return status.Error(codes.Unimplemented, "node agent: method not served")
		}))
	s := grpc.NewServer(opts...)
	a.register(s)
	return s
}
