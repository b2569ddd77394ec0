package devicelink

import mqtt "github.com/eclipse/paho.mqtt.golang"

// LogFrames takes the frames of the pods' logs devices stream to the hub
// (logstream.Streamer). Frame runs on the link's reader: it must not
// block.
type LogFrames interface {
	Frame(device string, payload []byte)
}

// logsHandler hands a device's log frames to Config.Logs (nil without).
func (h *Link) logsHandler() mqtt.MessageHandler {
	if h.cfg.Logs == nil {
		return nil
	}
	return func(_ mqtt.Client, m mqtt.Message) {
		if dev, ok := h.device(m); ok {
			h.cfg.Logs.Frame(dev, m.Payload())
		}
	}
}
