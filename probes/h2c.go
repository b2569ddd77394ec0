package probes

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// grpcCall is one gRPC unary call over plaintext HTTP/2 on conn: the
// request message (already framed), then the response's body and its
// grpc-status and grpc-message (trailers, or headers for a trailers-only
// response). It speaks just enough HTTP/2 for that: the daemon is built
// without net/http's HTTP/2 (packaging/buildflags.sh), whose client and
// server together are 0.5 MiB, and golang.org/x/net/http2's Transport
// would bring most of that back.
func grpcCall(ctx context.Context, conn net.Conn, authority, path string, msg []byte) (body []byte, status, message string, err error) {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(time.Minute)
	}
	conn.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) }) // cancellation interrupts reads
	defer stop()

	if _, err := conn.Write([]byte(http2.ClientPreface)); err != nil {
		return nil, "", "", err
	}
	fr := http2.NewFramer(conn, conn)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	fr.MaxHeaderListSize = maxOutput
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", path}, {":authority", authority},
		{"content-type", "application/grpc"}, {"te", "trailers"}} {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	const stream = 1
	if err := errors.Join(fr.WriteSettings(),
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: stream, BlockFragment: block.Bytes(), EndHeaders: true}),
		fr.WriteData(stream, true, msg)); err != nil {
		return nil, "", "", err
	}
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			if ctx.Err() != nil {
				return nil, "", "", ctx.Err()
			}
			return nil, "", "", err
		}
		ended := false
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				err = fr.WriteSettingsAck()
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				err = fr.WritePing(true, f.Data)
			}
		case *http2.GoAwayFrame:
			if f.LastStreamID < stream {
				return nil, "", "", fmt.Errorf("server refused the call: GOAWAY %v", f.ErrCode)
			}
		case *http2.RSTStreamFrame:
			return nil, "", "", fmt.Errorf("stream reset by the server: %v", f.ErrCode)
		case *http2.MetaHeadersFrame:
			if f.StreamID != stream {
				continue
			}
			for _, h := range f.Fields {
				switch h.Name {
				case "grpc-status":
					status = h.Value
				case "grpc-message":
					message = h.Value
				}
			}
			ended = f.StreamEnded()
		case *http2.DataFrame:
			if f.StreamID != stream {
				continue
			}
			if len(body)+len(f.Data()) > maxOutput {
				return nil, "", "", fmt.Errorf("gRPC response larger than %d bytes", maxOutput)
			}
			body = append(body, f.Data()...)
			ended = f.StreamEnded()
		}
		if err != nil {
			return nil, "", "", err
		}
		if ended {
			return body, status, message, nil
		}
	}
}
