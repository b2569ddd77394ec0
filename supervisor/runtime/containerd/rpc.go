package containerd

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
)

// rpcClient speaks JSON-RPC 1.0 as net/rpc/jsonrpc's server codec does
// ({"method","params":[args],"id"} → {"id","result","error"}), with
// concurrent calls. The daemon carries this instead of net/rpc, which
// links html/template for its debug page: +0.65 MiB of binary measured.
type rpcClient struct {
	w io.WriteCloser

	mu      sync.Mutex
	enc     *json.Encoder
	seq     uint64
	pending map[uint64]chan rpcResponse
	err     error // set once the connection is gone
}

type rpcRequest struct {
	Method string `json:"method"`
	Params [1]any `json:"params"`
	ID     uint64 `json:"id"`
}

type rpcResponse struct {
	ID     uint64          `json:"id"`
	Result json.RawMessage `json:"result"`
	Error  any             `json:"error"`
}

// remoteError is an error the plugin returned: an answer, not a failure
// of the connection.
type remoteError string

func (e remoteError) Error() string { return string(e) }

// errShutdown is every call's error once the connection is gone.
var errShutdown = errors.New("connection to the plugin is shut down")

func newRPCClient(r io.Reader, w io.WriteCloser) *rpcClient {
	c := &rpcClient{w: w, enc: json.NewEncoder(w), pending: map[uint64]chan rpcResponse{}}
	go c.read(r)
	return c
}

// read delivers responses until the connection ends, then fails every
// call still waiting.
func (c *rpcClient) read(r io.Reader) {
	dec := json.NewDecoder(bufio.NewReader(r))
	var err error
	for {
		var resp rpcResponse
		if err = dec.Decode(&resp); err != nil {
			break
		}
		c.mu.Lock()
		ch := c.pending[resp.ID]
		delete(c.pending, resp.ID)
		c.mu.Unlock()
		if ch != nil {
			ch <- resp
		}
	}
	c.mu.Lock()
	c.err = fmt.Errorf("%w: %v", errShutdown, err)
	for id, ch := range c.pending {
		delete(c.pending, id)
		close(ch)
	}
	c.mu.Unlock()
}

// Call sends a request and waits for its response.
func (c *rpcClient) Call(method string, args, reply any) error {
	ch := make(chan rpcResponse, 1)
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return c.err
	}
	c.seq++
	id := c.seq
	c.pending[id] = ch
	err := c.enc.Encode(rpcRequest{Method: method, Params: [1]any{args}, ID: id})
	if err != nil {
		delete(c.pending, id)
	}
	c.mu.Unlock()
	if err != nil {
		return fmt.Errorf("%w: %v", errShutdown, err)
	}
	resp, ok := <-ch
	if !ok {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.err
	}
	if resp.Error != nil {
		return remoteError(fmt.Sprint(resp.Error))
	}
	if reply == nil || len(resp.Result) == 0 {
		return nil
	}
	return json.Unmarshal(resp.Result, reply)
}

// Close ends the connection: the plugin exits when its stdin closes.
func (c *rpcClient) Close() error { return c.w.Close() }
