// mqtt_paho_load: the MQTT load generator bench/mqtt_vs_loadgen.sh puts
// beside `megaconn client --protocol mqtt`. Its MQTT is Eclipse paho's
// Go client (github.com/eclipse/paho.mqtt.golang, pinned in go.mod), and
// its load and its measurement are those of krylovsk/mqtt-benchmark, the
// usual Go MQTT benchmark (not served by the module proxy here, so not
// installable as it is): each of -clients publishers connects, then
// publishes -count messages of -size bytes at -qos to its own topic,
// -topic/<i>, one after the other, waiting for each publish's token
// (QoS 0: written to the socket; QoS 1 and 2: acknowledged) before the
// next. A message's time is from its actual send to its token (closed
// loop: a slow acknowledgement delays the sends after it and is not
// counted against them). -interval paces each publisher (the next send
// at the previous one's start plus the interval, or when its token came
// if later), so megaconn's open-loop rate and this tool's load match.
// -subscribers clients subscribe to -topic/# at -qos before the first
// publish; every payload starts with its send time (Unix ns), and each
// receipt is timed from it.
//
// It prints one JSON object (-json) or a short text summary. Every wait
// is bounded by -timeout; at most 10,000,000 publishes are timed.
package main

import (
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
)

// maxTimed bounds the latency samples kept in memory (8 bytes each).
const maxTimed = 10_000_000

// stallWait: after the last publish, how long the subscribers may hear
// nothing before the run ends without the deliveries still missing.
const stallWait = 3 * time.Second

// stampBytes is the send time at the start of every payload.
const stampBytes = 8

// Percentiles of a set of durations, in milliseconds.
type Percentiles struct {
	Count int     `json:"count"`
	P50   float64 `json:"p50_ms"`
	P99   float64 `json:"p99_ms"`
	Max   float64 `json:"max_ms"`
	Mean  float64 `json:"mean_ms"`
}

// Result is what one run prints.
type Result struct {
	Tool            string      `json:"tool"`
	Clients         int         `json:"clients"`
	Count           int         `json:"count"`
	QoS             int         `json:"qos"`
	Size            int         `json:"size"`
	Subscribers     int         `json:"subscribers"`
	ConnectFailed   int         `json:"connect_failed"`
	Published       int64       `json:"published"`
	PublishFailed   int64       `json:"publish_failed"`
	RunSeconds      float64     `json:"run_seconds"`
	MsgsPerSecond   float64     `json:"msgs_per_s"`
	Publish         Percentiles `json:"publish_ms"`
	ExpectedRecv    int64       `json:"expected_received"`
	Received        int64       `json:"received"`
	ReceivedPerSec  float64     `json:"received_per_s"`
	Delivery        Percentiles `json:"delivery_ms"`
	TimedOut        bool        `json:"timed_out"`
	MeasuredFrom    string      `json:"measured_from"`
	DeliveryMeasure string      `json:"delivery_measured_from"`
}

// samples collects durations from many goroutines, at most maxTimed.
type samples struct {
	mu sync.Mutex
	ns []int64
}

func (s *samples) add(d time.Duration) {
	s.mu.Lock()
	if len(s.ns) < maxTimed {
		s.ns = append(s.ns, int64(d))
	}
	s.mu.Unlock()
}

func (s *samples) percentiles() Percentiles {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := Percentiles{Count: len(s.ns)}
	if len(s.ns) == 0 {
		return p
	}
	sort.Slice(s.ns, func(i, j int) bool { return s.ns[i] < s.ns[j] })
	rank := func(q float64) float64 {
		i := int(q*float64(len(s.ns))+0.999999) - 1
		if i < 0 {
			i = 0
		}
		return float64(s.ns[i]) / 1e6
	}
	var sum float64
	for _, v := range s.ns {
		sum += float64(v)
	}
	p.P50, p.P99, p.Max, p.Mean = rank(0.50), rank(0.99), float64(s.ns[len(s.ns)-1])/1e6, sum/float64(len(s.ns))/1e6
	return p
}

type options struct {
	broker      string
	clients     int
	count       int
	qos         int
	size        int
	subscribers int
	topic       string
	interval    time.Duration
	timeout     time.Duration
	json        bool
}

func parse() options {
	var o options
	flag.StringVar(&o.broker, "broker", "tcp://127.0.0.1:1883", "MQTT broker as tcp://host:port")
	flag.IntVar(&o.clients, "clients", 10, "publishers")
	flag.IntVar(&o.count, "count", 100, "messages per publisher")
	flag.IntVar(&o.qos, "qos", 1, "QoS of publishes and subscriptions (0, 1 or 2)")
	flag.IntVar(&o.size, "size", 64, "payload bytes (at least 8: the send time)")
	flag.IntVar(&o.subscribers, "subscribers", 0, "clients subscribed to TOPIC/#")
	flag.StringVar(&o.topic, "topic", "paho", "topic prefix: publisher i publishes to TOPIC/i")
	flag.DurationVar(&o.interval, "interval", 0, "each publisher's time between sends (0: as fast as its tokens come)")
	flag.DurationVar(&o.timeout, "timeout", 120*time.Second, "bound on the whole run")
	flag.BoolVar(&o.json, "json", false, "print the result as JSON")
	flag.Parse()
	if o.clients < 1 || o.count < 1 || o.qos < 0 || o.qos > 2 || o.size < stampBytes || o.subscribers < 0 ||
		int64(o.clients)*int64(o.count) > maxTimed {
		fmt.Fprintf(os.Stderr, "mqtt_paho_load: need -clients >= 1, -count >= 1, clients x count <= %d, -qos 0..2, -size >= %d\n", maxTimed, stampBytes)
		os.Exit(2)
	}
	return o
}

func connect(o options, id string, onMessage mqtt.MessageHandler) (mqtt.Client, error) {
	opts := mqtt.NewClientOptions().AddBroker(o.broker).SetClientID(id).SetCleanSession(true).
		SetAutoReconnect(false).SetConnectRetry(false).SetKeepAlive(60 * time.Second).
		SetConnectTimeout(10 * time.Second).SetWriteTimeout(10 * time.Second).SetOrderMatters(false)
	if onMessage != nil {
		opts.SetDefaultPublishHandler(onMessage)
	}
	c := mqtt.NewClient(opts)
	t := c.Connect()
	if !t.WaitTimeout(o.timeout) {
		return nil, fmt.Errorf("%s: connect timed out", id)
	}
	return c, t.Error()
}

func main() {
	o := parse()
	deadline := time.Now().Add(o.timeout)
	res := Result{Tool: "mqtt_paho_load (paho.mqtt.golang v1.5.1)", Clients: o.clients, Count: o.count, QoS: o.qos,
		Size: o.size, Subscribers: o.subscribers,
		MeasuredFrom:    "actual send to the token (QoS 0 written, 1 PUBACK, 2 PUBCOMP); closed loop: the next send waits for it",
		DeliveryMeasure: "actual send (stamp in the payload) to receipt"}
	var delivery, publish samples
	var received atomic.Int64
	res.ExpectedRecv = int64(o.clients) * int64(o.count) * int64(o.subscribers)
	allIn := make(chan struct{})
	var closeOnce sync.Once
	onMessage := func(_ mqtt.Client, m mqtt.Message) {
		p := m.Payload()
		if len(p) >= stampBytes {
			sent := int64(binary.BigEndian.Uint64(p))
			delivery.add(time.Duration(time.Now().UnixNano() - sent))
		}
		if received.Add(1) == res.ExpectedRecv {
			closeOnce.Do(func() { close(allIn) })
		}
	}
	var subs, pubs []mqtt.Client
	for i := 0; i < o.subscribers; i++ {
		c, err := connect(o, fmt.Sprintf("paho-sub-%d", i), onMessage)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			res.ConnectFailed++
			continue
		}
		if t := c.Subscribe(o.topic+"/#", byte(o.qos), nil); !t.WaitTimeout(o.timeout) || t.Error() != nil {
			fmt.Fprintf(os.Stderr, "paho-sub-%d: subscribe failed: %v\n", i, t.Error())
			res.ConnectFailed++
			c.Disconnect(0)
			continue
		}
		subs = append(subs, c)
	}
	for i := 0; i < o.clients; i++ {
		c, err := connect(o, fmt.Sprintf("paho-pub-%d", i), nil)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			res.ConnectFailed++
			pubs = append(pubs, nil)
			continue
		}
		pubs = append(pubs, c)
	}
	var published, failed atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for i, c := range pubs {
		if c == nil {
			continue
		}
		wg.Add(1)
		go func(i int, c mqtt.Client) {
			defer wg.Done()
			topic := fmt.Sprintf("%s/%d", o.topic, i)
			payload := make([]byte, o.size)
			next := time.Now()
			for n := 0; n < o.count && time.Now().Before(deadline); n++ {
				if wait := time.Until(next); wait > 0 {
					time.Sleep(wait)
				}
				sent := time.Now()
				next = sent.Add(o.interval)
				binary.BigEndian.PutUint64(payload, uint64(sent.UnixNano()))
				t := c.Publish(topic, byte(o.qos), false, payload)
				if !t.WaitTimeout(time.Until(deadline)) || t.Error() != nil {
					failed.Add(1)
					continue
				}
				publish.add(time.Since(sent))
				published.Add(1)
			}
		}(i, c)
	}
	wg.Wait()
	res.RunSeconds = time.Since(start).Seconds()
	// Deliveries still on their way: wait for all, or until none came
	// for stallWait (QoS 0 may lose some), or the deadline.
	last, lastAt := received.Load(), time.Now()
	for o.subscribers > 0 && res.ExpectedRecv > 0 {
		select {
		case <-allIn:
		case <-time.After(100 * time.Millisecond):
			if n := received.Load(); n != last {
				last, lastAt = n, time.Now()
			}
			if time.Since(lastAt) < stallWait && time.Now().Before(deadline) {
				continue
			}
			res.TimedOut = time.Now().After(deadline)
		}
		break
	}
	recvSeconds := time.Since(start).Seconds()
	for _, c := range append(pubs, subs...) {
		if c != nil {
			c.Disconnect(100)
		}
	}
	res.Published, res.PublishFailed = published.Load(), failed.Load()
	res.MsgsPerSecond = float64(res.Published) / res.RunSeconds
	res.Publish = publish.percentiles()
	res.Received = received.Load()
	res.ReceivedPerSec = float64(res.Received) / recvSeconds
	res.Delivery = delivery.percentiles()
	res.TimedOut = res.TimedOut || time.Now().After(deadline)
	if o.json {
		out, _ := json.Marshal(res)
		fmt.Println(string(out))
	} else {
		fmt.Printf("published %d of %d (%d failed) in %.3f s: %.0f msg/s; publish p50 %.2f ms p99 %.2f ms\n",
			res.Published, o.clients*o.count, res.PublishFailed, res.RunSeconds, res.MsgsPerSecond, res.Publish.P50, res.Publish.P99)
		fmt.Printf("received %d of %d: delivery p50 %.2f ms p99 %.2f ms\n", res.Received, res.ExpectedRecv, res.Delivery.P50, res.Delivery.P99)
	}
	if res.ConnectFailed > 0 || res.PublishFailed > 0 || res.TimedOut {
		os.Exit(1)
	}
}
