package bus

import (
	"bufio"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// portHolder names the process listening on listen's port, for the error of a bus that
// could not bind it: "address already in use" alone leaves an operator to hunt for which
// meshctl, of which state directory, holds it. It reads /proc: the listening socket's
// inode in /proc/net/tcp{,6}, the process holding that inode among its descriptors, and —
// when that process holds a state directory's bus lock and that directory's bus.json
// records it on this port — the state directory. Processes of other users are not
// readable, and then nothing is said. It returns "" when it can tell nothing.
func portHolder(listen string) string {
	_, portText, err := net.SplitHostPort(listen)
	if err != nil {
		return ""
	}
	port, err := strconv.Atoi(portText)
	if err != nil || port <= 0 {
		return ""
	}
	inodes := listeningInodes(port)
	if len(inodes) == 0 {
		return ""
	}
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, proc := range procs {
		pid, err := strconv.Atoi(filepath.Base(proc))
		if err != nil {
			continue
		}
		fds, err := os.ReadDir(filepath.Join(proc, "fd"))
		if err != nil {
			continue
		}
		holds := false
		var locks []string
		for _, fd := range fds {
			target, err := os.Readlink(filepath.Join(proc, "fd", fd.Name()))
			if err != nil {
				continue
			}
			if inode, ok := strings.CutPrefix(target, "socket:["); ok && inodes[strings.TrimSuffix(inode, "]")] {
				holds = true
			}
			if filepath.Base(target) == lockName && filepath.Base(filepath.Dir(target)) == busDirName {
				locks = append(locks, filepath.Dir(filepath.Dir(target)))
			}
		}
		if !holds {
			continue
		}
		for _, stateDir := range locks {
			rec, err := readBusRecord(filepath.Join(stateDir, busDirName, busRecordName))
			if err == nil && rec.PID == pid && recordPort(rec.URL) == port {
				return fmt.Sprintf("meshctl pid %d holds port %d: it serves the embedded bus of the state directory %s", pid, port, stateDir)
			}
		}
		comm, _ := os.ReadFile(filepath.Join(proc, "comm"))
		return fmt.Sprintf("pid %d (%s) holds port %d", pid, strings.TrimSpace(string(comm)), port)
	}
	return ""
}

// listeningInodes are the socket inodes listening on port, IPv4 and IPv6.
func listeningInodes(port int) map[string]bool {
	const listenState = "0A"
	inodes := map[string]bool{}
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		f, err := os.Open(table)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Scan() // the header
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 10 || fields[3] != listenState {
				continue
			}
			i := strings.LastIndex(fields[1], ":")
			if p, err := strconv.ParseUint(fields[1][i+1:], 16, 16); err == nil && int(p) == port {
				inodes[fields[9]] = true
			}
		}
		f.Close()
	}
	return inodes
}

func recordPort(raw string) int {
	u, err := url.Parse(raw)
	if err != nil {
		return 0
	}
	p, _ := strconv.Atoi(u.Port())
	return p
}
