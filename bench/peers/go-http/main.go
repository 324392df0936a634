// SPDX-License-Identifier: MIT

// The Go peer of examples/httpd for the HTTP groups: a net/http server answering
// "Hello, World!" on "/", written the way the standard library is meant to be
// used.  GOMAXPROCS (environment) picks how many cores it may use.
//
//	http-go -listen 127.0.0.1:8080 [-tls-cert FILE -tls-key FILE]
//
// With -tls-cert and -tls-key it serves HTTPS with crypto/tls (the tls group).
package main

import (
	"flag"
	"log"
	"net/http"
)

var hello = []byte("Hello, World!")

func main() {
	listen := flag.String("listen", "127.0.0.1:8080", "address to listen on")
	cert := flag.String("tls-cert", "", "serve HTTPS with this PEM certificate")
	key := flag.String("tls-key", "", "and this PEM key")
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
		log.Fatal(http.ListenAndServeTLS(*listen, *cert, *key, mux))
	}
	log.Fatal(http.ListenAndServe(*listen, mux))
}
