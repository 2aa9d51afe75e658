// Command nodeadm-check reads an AL2023 node's user data as nodeadm does on boot: the MIME
// multipart archive's `application/node.eks.aws` parts (or the whole text, when it is not
// multipart) decoded by nodeadm's own decoder, merged in order by nodeadm's own merge, and
// judged by nodeadm's own validation. It prints the merged NodeConfig as JSON and exits 0,
// or prints nodeadm's error and exits 1: the node would not have joined.
//
// It exists because nodeadm's `config check` at the only version the module proxy serves
// neither validates nor reads MIME from a file; its parts do, but they are internal, which is
// why this module's path sits under nodeadm's.
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/mail"
	"os"
	"strings"

	"github.com/awslabs/amazon-eks-ami/nodeadm/internal/api"
	"github.com/awslabs/amazon-eks-ami/nodeadm/internal/api/bridge"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: nodeadm-check USER_DATA_FILE|-")
		os.Exit(2)
	}
	var data []byte
	var err error
	if os.Args[1] == "-" {
		data, err = io.ReadAll(os.Stdin)
	} else {
		data, err = os.ReadFile(os.Args[1])
	}
	if err == nil {
		var cfg *api.NodeConfig
		if cfg, err = nodeConfig(data); err == nil {
			if err = api.ValidateNodeConfig(cfg); err == nil {
				err = json.NewEncoder(os.Stdout).Encode(cfg)
			}
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// nodeConfig follows nodeadm's user-data provider: a multipart archive contributes its
// NodeConfig parts, anything else must be one NodeConfig document.
func nodeConfig(data []byte) (*api.NodeConfig, error) {
	parts, err := multipartReader(data)
	if err != nil {
		return bridge.DecodeNodeConfig(data)
	}
	var merged *api.NodeConfig
	for {
		part, err := parts.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		header := part.Header.Get("Content-Type")
		if header == "" {
			continue
		}
		mediaType, _, err := mime.ParseMediaType(header)
		if err != nil {
			return nil, err
		}
		if mediaType != "application/node.eks.aws" {
			continue
		}
		body, err := io.ReadAll(part)
		if err != nil {
			return nil, err
		}
		doc, err := bridge.DecodeNodeConfig(body)
		if err != nil {
			return nil, err
		}
		if merged == nil {
			merged = doc
		} else if err := merged.Merge(doc); err != nil {
			return nil, err
		}
	}
	if merged == nil {
		return nil, fmt.Errorf("Could not find NodeConfig within UserData")
	}
	return merged, nil
}

func multipartReader(data []byte) (*multipart.Reader, error) {
	msg, err := mail.ReadMessage(bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	mediaType, params, err := mime.ParseMediaType(msg.Header.Get("Content-Type"))
	if err != nil {
		return nil, err
	}
	if !strings.HasPrefix(mediaType, "multipart/") {
		return nil, fmt.Errorf("MIME type is not multipart")
	}
	return multipart.NewReader(msg.Body, params["boundary"]), nil
}
