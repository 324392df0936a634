// SPDX-License-Identifier: MIT

// The Go peer of examples/httpd for the HTTP groups: a net/http server answering
// "Hello, World!" on "/", written the way the standard library is meant to be
// used.  GOMAXPROCS (environment) picks how many cores it may use.
//
//	http-go -listen 127.0.0.1:8080 [-tls-cert FILE -tls-key FILE [-tls-no-tickets]]
//
// With -tls-cert and -tls-key it serves HTTPS with crypto/tls (the tls group);
// -tls-no-tickets issues no session tickets, so that every connection makes a
// full handshake (crypto/tls keeps no server-side session cache).
package main

import (
	"crypto/tls"
	"flag"
	"log"
	"net/http"
)

var hello = []byte("Hello, World!")

func main() {
	listen := flag.String("listen", "127.0.0.1:8080", "address to listen on")
	cert := flag.String("tls-cert", "", "serve HTTPS with this PEM certificate")
	key := flag.String("tls-key", "", "and this PEM key")
	noTickets := flag.Bool("tls-no-tickets", false, "issue no session tickets: a full handshake per connection")
	flag.Parse()
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		// Set the type, as httpd and nginx do, rather than have Go sniff it.
		w.Header().Set("Content-Type", "text/plain")
		w.Write(hello)
	})
	if *cert != "" {
		srv := &http.Server{Addr: *listen, Handler: mux,
			TLSConfig: &tls.Config{SessionTicketsDisabled: *noTickets}}
		log.Fatal(srv.ListenAndServeTLS(*cert, *key))
	}
	log.Fatal(http.ListenAndServe(*listen, mux))
}
