package main

import (
	"log/slog"
	"os"
)

// warnReadableSecrets logs, at every start, each file of lathed's secrets
// that users other than lathed's may read: the config when it holds API
// tokens inline, and auth.tokens_file. A trainer running as a user of its
// own (or as worker.run_as) reads what others may read, so such a file
// hands it an API token. lathed cannot fix another's file for them; it
// names the file and the command.
func warnReadableSecrets(configPath string, fc *fileConfig, log *slog.Logger) {
	var files []string
	if configPath != "" && len(fc.Auth.Tokens) > 0 {
		files = append(files, configPath)
	}
	if fc.Auth.TokensFile != "" {
		files = append(files, fc.Auth.TokensFile)
	}
	for _, f := range files {
		st, err := os.Stat(f)
		if err != nil || st.Mode().Perm()&0o004 == 0 {
			continue
		}
		log.Error("API TOKENS READABLE BY EVERY USER, trainers included: chmod o-r the file (and keep it lathed's)",
			slog.String("file", f), slog.String("mode", st.Mode().Perm().String()))
	}
}
