package podrunner

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	v1 "k8s.io/api/core/v1"
)

// resolvedCommand is what a container runs: there are no images here, only programs.
type resolvedCommand struct {
	argv    []string
	imageID string
}

// resolveCommand maps a container to a local command line. An image whose repository
// ends in the name of a program in build/bin (ghcr.io/cohort/cohort-sidecar:0.1.0 ->
// build/bin/cohort-sidecar) runs that program: with the container's args, or with its
// command when the command names the same program. Any other image runs command+args
// as given, found through the container's PATH.
func (r *Runner) resolveCommand(c *v1.Container, env *environment) (resolvedCommand, error) {
	command := expandAll(c.Command, env)
	args := expandAll(c.Args, env)
	name := imageProgram(c.Image)
	if bin := r.cohortBinary(name); bin != "" {
		id := "local://" + bin
		switch {
		case len(command) == 0:
			return resolvedCommand{argv: append([]string{bin}, args...), imageID: id}, nil
		case filepath.Base(command[0]) == name:
			return resolvedCommand{argv: append(append([]string{bin}, command[1:]...), args...), imageID: id}, nil
		}
		return resolvedCommand{argv: r.mapInterpreter(append(command, args...)), imageID: id}, nil
	}
	if len(command) == 0 {
		if name == "pause" {
			// The conventional do-nothing container.
			return resolvedCommand{argv: []string{"sleep", "infinity"}, imageID: "local://pause"}, nil
		}
		return resolvedCommand{}, fmt.Errorf("image %q names no program in %s and the container has no command; "+
			"the local pod runner cannot run images, give the container a command", c.Image, r.cfg.BinDir)
	}
	return resolvedCommand{argv: r.mapInterpreter(append(command, args...)), imageID: "local://" + c.Image}, nil
}

// mapInterpreter swaps a bare python/python3 for the configured interpreter.
func (r *Runner) mapInterpreter(argv []string) []string {
	if r.cfg.Python != "" && len(argv) > 0 && (argv[0] == "python" || argv[0] == "python3") {
		argv = append([]string{r.cfg.Python}, argv[1:]...)
	}
	return argv
}

// cohortBinary returns build/bin/NAME if it is an executable file.
func (r *Runner) cohortBinary(name string) string {
	if name == "" || r.cfg.BinDir == "" {
		return ""
	}
	path := filepath.Join(r.cfg.BinDir, name)
	info, err := os.Stat(path)
	if err != nil || info.IsDir() || info.Mode()&0o111 == 0 {
		return ""
	}
	return path
}

// imageProgram is the last path component of an image's repository, without tag or
// digest: registry:5000/org/cohort-operator:1.2@sha256:... -> cohort-operator.
func imageProgram(image string) string {
	image, _, _ = strings.Cut(image, "@")
	name := image[strings.LastIndex(image, "/")+1:]
	name, _, _ = strings.Cut(name, ":")
	return name
}
