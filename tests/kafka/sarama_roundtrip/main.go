// sarama_roundtrip: a Go service's view of a Kafka-protocol broker, for raftlog's tests.
//
// It uses Sarama 1.22 (Debian's golang-github-shopify-sarama-dev), speaking the protocol of
// Kafka 2.0 (cfg.Version = sarama.V2_0_0_0). Sarama 1.22 sends no ApiVersions: it picks each
// version from cfg.Version alone (Metadata v5, Produce v3, Fetch v4, ListOffsets v1,
// InitProducerId v0 with a null transactional id and a zero timeout).
// Built offline in GOPATH mode by tests/kafka/golang.py:
//
//	GO111MODULE=off GOPATH=$G:/usr/share/gocode go build
//
// Modes:
//
//	produce    send -n keyed records (key PREFIX-key-I, value PREFIX-value-I, headers
//	           source=PREFIX and index=I, I from 0) to -topic (to -partition when it is
//	           >= 0, else by Sarama's key hash), with a SyncProducer, then exit
//	consume    read every partition of -topic (or only -partition) from its oldest offset, with
//	           one partition consumer each (no consumer group), until -n records were read, or
//	           with -n 0 up to the newest offsets the broker reports (ListOffsets latest)
//	roundtrip  produce, then consume until every partition written to is read past the last
//	           offset the producer was acknowledged (or, with -acks 0, until -n records)
//
// Output: one JSON object per line. With -output records (the default), one per record read:
// {"topic","partition","offset","key","value","headers":[[k,v],...],"timestamp_ms"}; key and
// value are strings (null for a null key), so tests should send UTF-8 text. With -output
// summary, one object at the end: {"produced","consumed","partitions":{"0":count,...},
// "produce_s","consume_s"}. Every error ends the program with exit status 1 and a line
// "sarama_roundtrip: <what failed>: <error>" on stderr; nothing waits longer than -timeout.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/Shopify/sarama"
)

type options struct {
	brokers     []string
	topic       string
	n           int
	mode        string
	acks        sarama.RequiredAcks
	partition   int
	compression sarama.CompressionCodec
	idempotent  bool
	output      string
	timeout     time.Duration
	prefix      string
}

type record struct {
	Topic       string      `json:"topic"`
	Partition   int32       `json:"partition"`
	Offset      int64       `json:"offset"`
	Key         *string     `json:"key"`
	Value       *string     `json:"value"`
	Headers     [][2]string `json:"headers"`
	TimestampMs int64       `json:"timestamp_ms"`
}

type summary struct {
	Produced   int            `json:"produced"`
	Consumed   int            `json:"consumed"`
	Partitions map[string]int `json:"partitions"`
	ProduceS   float64        `json:"produce_s"`
	ConsumeS   float64        `json:"consume_s"`
}

func fail(what string, err error) {
	fmt.Fprintf(os.Stderr, "sarama_roundtrip: %s: %v\n", what, err)
	os.Exit(1)
}

func parseOptions() options {
	brokers := flag.String("brokers", "127.0.0.1:9092", "bootstrap host:port list, comma separated")
	topic := flag.String("topic", "", "the topic (must exist, or the broker must create it)")
	n := flag.Int("n", 10, "records to produce; with -mode consume, records to read "+
		"(0: up to the newest offsets the broker reports)")
	mode := flag.String("mode", "roundtrip", "produce, consume or roundtrip")
	acks := flag.String("acks", "all", "all (-1), 1 or 0")
	partition := flag.Int("partition", -1, "the partition to produce to and read (-1: all)")
	compression := flag.String("compression", "none", "none, gzip, snappy, lz4 or zstd")
	idempotent := flag.Bool("idempotent", false, "an idempotent producer (needs -acks all)")
	output := flag.String("output", "records", "records (one JSON line each) or summary")
	timeout := flag.Duration("timeout", 30*time.Second, "deadline for each phase")
	prefix := flag.String("prefix", "sarama",
		"keys are PREFIX-key-I, values PREFIX-value-I, headers source=PREFIX and index=I")
	flag.Parse()

	o := options{
		brokers: strings.Split(*brokers, ","), topic: *topic, n: *n, mode: *mode,
		partition: *partition, idempotent: *idempotent, output: *output, timeout: *timeout,
		prefix: *prefix,
	}
	if o.topic == "" {
		fail("options", fmt.Errorf("-topic is required"))
	}
	if o.mode != "produce" && o.mode != "consume" && o.mode != "roundtrip" {
		fail("options", fmt.Errorf("-mode %q: want produce, consume or roundtrip", o.mode))
	}
	if o.output != "records" && o.output != "summary" {
		fail("options", fmt.Errorf("-output %q: want records or summary", o.output))
	}
	switch *acks {
	case "all", "-1":
		o.acks = sarama.WaitForAll
	case "1":
		o.acks = sarama.WaitForLocal
	case "0":
		o.acks = sarama.NoResponse
	default:
		fail("options", fmt.Errorf("-acks %q: want all, 1 or 0", *acks))
	}
	codecs := map[string]sarama.CompressionCodec{
		"none": sarama.CompressionNone, "gzip": sarama.CompressionGZIP,
		"snappy": sarama.CompressionSnappy, "lz4": sarama.CompressionLZ4,
		"zstd": sarama.CompressionZSTD,
	}
	codec, ok := codecs[*compression]
	if !ok {
		fail("options", fmt.Errorf("-compression %q: want none, gzip, snappy, lz4 or zstd",
			*compression))
	}
	o.compression = codec
	return o
}

func newConfig(o options) *sarama.Config {
	cfg := sarama.NewConfig()
	cfg.ClientID = "raftlog-sarama-roundtrip"
	cfg.Version = sarama.V2_0_0_0
	cfg.Net.DialTimeout = o.timeout
	cfg.Net.ReadTimeout = o.timeout
	cfg.Net.WriteTimeout = o.timeout
	cfg.Metadata.Retry.Max = 10
	cfg.Metadata.Retry.Backoff = 200 * time.Millisecond
	cfg.Producer.RequiredAcks = o.acks
	cfg.Producer.Timeout = o.timeout
	cfg.Producer.Compression = o.compression
	cfg.Producer.Return.Successes = true
	cfg.Producer.Return.Errors = true
	// Several records per batch, so that compression and batching are exercised.
	cfg.Producer.Flush.Messages = 100
	cfg.Producer.Flush.Frequency = 5 * time.Millisecond
	if o.partition >= 0 {
		cfg.Producer.Partitioner = sarama.NewManualPartitioner
	}
	if o.idempotent {
		// Sarama 1.22 checks these in Config.Validate: Version >= 0.11, acks all, retries,
		// and one request in flight per broker connection.
		cfg.Producer.Idempotent = true
		cfg.Net.MaxOpenRequests = 1
		cfg.Producer.Retry.Max = 5
	}
	cfg.Consumer.Return.Errors = true
	cfg.Consumer.MaxWaitTime = 250 * time.Millisecond
	return cfg
}

// produce sends the records and returns, per partition, the offset after the last one written
// (nil with -acks 0, where the broker says nothing).
func produce(client sarama.Client, o options) map[int32]int64 {
	producer, err := sarama.NewSyncProducerFromClient(client)
	if err != nil {
		fail("starting the producer", err)
	}
	defer producer.Close()
	msgs := make([]*sarama.ProducerMessage, 0, o.n)
	for i := 0; i < o.n; i++ {
		m := &sarama.ProducerMessage{
			Topic: o.topic,
			Key:   sarama.StringEncoder(fmt.Sprintf("%s-key-%d", o.prefix, i)),
			Value: sarama.StringEncoder(fmt.Sprintf("%s-value-%d", o.prefix, i)),
			Headers: []sarama.RecordHeader{
				{Key: []byte("source"), Value: []byte(o.prefix)},
				{Key: []byte("index"), Value: []byte(strconv.Itoa(i))},
			},
		}
		if o.partition >= 0 {
			m.Partition = int32(o.partition)
		}
		msgs = append(msgs, m)
	}
	done := make(chan error, 1)
	go func() { done <- producer.SendMessages(msgs) }()
	select {
	case err := <-done:
		if err != nil {
			if errs, ok := err.(sarama.ProducerErrors); ok && len(errs) > 0 {
				fail(fmt.Sprintf("producing (%d of %d failed)", len(errs), o.n), errs[0].Err)
			}
			fail("producing", err)
		}
	case <-time.After(o.timeout):
		fail("producing", fmt.Errorf("not acknowledged within %v", o.timeout))
	}
	if o.acks == sarama.NoResponse {
		return nil
	}
	ends := map[int32]int64{}
	for _, m := range msgs {
		if m.Offset+1 > ends[m.Partition] {
			ends[m.Partition] = m.Offset + 1
		}
	}
	return ends
}

func partitionsOf(client sarama.Client, o options) []int32 {
	if o.partition >= 0 {
		return []int32{int32(o.partition)}
	}
	ps, err := client.Partitions(o.topic)
	if err != nil {
		fail("listing partitions of "+o.topic, err)
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
	return ps
}

// consume reads the partitions from their oldest offsets, all at once, until each partition in
// ends has reached its end offset, or, when ends is nil, until want records were read.
func consume(client sarama.Client, o options, ends map[int32]int64, want int,
	emit func(record)) int {
	consumer, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		fail("starting the consumer", err)
	}
	defer consumer.Close()
	messages := make(chan *sarama.ConsumerMessage)
	errs := make(chan *sarama.ConsumerError)
	next := map[int32]int64{}
	for _, p := range partitionsOf(client, o) {
		if ends != nil && ends[p] == 0 {
			continue
		}
		pc, err := consumer.ConsumePartition(o.topic, p, sarama.OffsetOldest)
		if err != nil {
			fail(fmt.Sprintf("consuming %s-%d", o.topic, p), err)
		}
		defer pc.AsyncClose()
		next[p] = 0
		go func() {
			for m := range pc.Messages() {
				messages <- m
			}
		}()
		go func() {
			for e := range pc.Errors() {
				errs <- e
			}
		}()
	}
	done := func(count int) bool {
		if ends == nil {
			return count >= want
		}
		for p, end := range ends {
			if next[p] < end {
				return false
			}
		}
		return true
	}
	deadline := time.After(o.timeout)
	count := 0
	for !done(count) {
		select {
		case m := <-messages:
			r := record{
				Topic: m.Topic, Partition: m.Partition, Offset: m.Offset,
				Headers: [][2]string{}, TimestampMs: m.Timestamp.UnixNano() / 1e6,
			}
			if m.Key != nil {
				k := string(m.Key)
				r.Key = &k
			}
			if m.Value != nil {
				v := string(m.Value)
				r.Value = &v
			}
			for _, h := range m.Headers {
				r.Headers = append(r.Headers, [2]string{string(h.Key), string(h.Value)})
			}
			emit(r)
			count++
			next[m.Partition] = m.Offset + 1
		case e := <-errs:
			fail(fmt.Sprintf("consuming %s-%d", e.Topic, e.Partition), e.Err)
		case <-deadline:
			fail("consuming "+o.topic, fmt.Errorf(
				"read %d records within %v; want %s (next offsets %v)",
				count, o.timeout, expected(ends, want), next))
		}
	}
	return count
}

func expected(ends map[int32]int64, want int) string {
	if ends == nil {
		return fmt.Sprintf("%d records", want)
	}
	return fmt.Sprintf("end offsets %v", ends)
}

// newestOffsets asks the broker for each partition's newest offset (its high watermark).
func newestOffsets(client sarama.Client, o options) map[int32]int64 {
	ends := map[int32]int64{}
	for _, p := range partitionsOf(client, o) {
		end, err := client.GetOffset(o.topic, p, sarama.OffsetNewest)
		if err != nil {
			fail(fmt.Sprintf("the newest offset of %s-%d", o.topic, p), err)
		}
		ends[p] = end
	}
	return ends
}

func main() {
	o := parseOptions()
	cfg := newConfig(o)
	if err := cfg.Validate(); err != nil {
		fail("configuration", err)
	}
	client, err := sarama.NewClient(o.brokers, cfg)
	if err != nil {
		fail("connecting to "+strings.Join(o.brokers, ","), err)
	}
	defer client.Close()

	out := json.NewEncoder(os.Stdout)
	s := summary{Partitions: map[string]int{}}
	var ends map[int32]int64
	want := o.n
	if o.mode != "consume" {
		t0 := time.Now()
		ends = produce(client, o)
		s.Produced = o.n
		s.ProduceS = time.Since(t0).Seconds()
	} else if o.n == 0 {
		ends = newestOffsets(client, o)
	}
	if o.mode != "produce" {
		t0 := time.Now()
		s.Consumed = consume(client, o, ends, want, func(r record) {
			s.Partitions[strconv.Itoa(int(r.Partition))]++
			if o.output == "records" {
				if err := out.Encode(r); err != nil {
					fail("writing a record", err)
				}
			}
		})
		s.ConsumeS = time.Since(t0).Seconds()
	}
	if o.output == "summary" {
		if err := out.Encode(s); err != nil {
			fail("writing the summary", err)
		}
	}
}
