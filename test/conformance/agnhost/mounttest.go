package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"syscall"
	"time"
)

// mounttest is upstream agnhost's mounttest (test/images/agnhost/mounttest),
// its flags, order of work and output lines unchanged, so the ported
// volume tests assert upstream's strings. Two differences: the
// --file_content_in_loop poll is 500 ms (upstream 2 s; the tests' waits
// are scaled with it), and SIGTERM ends the loop at once (upstream's PID
// 1 waits out the grace period).
func mounttest(ctx context.Context, args []string) {
	fs := flag.NewFlagSet("mounttest", flag.ExitOnError)
	fsTypePath := fs.String("fs_type", "", "Path to print the fs type for")
	fileModePath := fs.String("file_mode", "", "Path to print the mode bits of")
	filePermPath := fs.String("file_perm", "", "Path to print the perms of")
	fileOwnerPath := fs.String("file_owner", "", "Path to print the owning UID and GID of")
	newFilePath0644 := fs.String("new_file_0644", "", "Path to write to and read from with perm 0644")
	newFilePath0666 := fs.String("new_file_0666", "", "Path to write to and read from with perm 0666")
	newFilePath0660 := fs.String("new_file_0660", "", "Path to write to and read from with perm 0660")
	newFilePath0777 := fs.String("new_file_0777", "", "Path to write to and read from with perm 0777")
	readFileContentPath := fs.String("file_content", "", "Path to read the file content from")
	readFileContentInLoopPath := fs.String("file_content_in_loop", "", "Path to read the file content in loop from")
	retryDuration := fs.Int("retry_time", 180, "Retry time during the loop")
	breakOnExpectedContent := fs.Bool("break_on_expected_content", true, "Break out of loop on expected content, (use with --file_content_in_loop flag only)")
	fs.Parse(args)

	// Clear the umask so we can set any mode bits we want.
	syscall.Umask(0)
	var errs []error
	for _, err := range []error{
		fsType(*fsTypePath),
		readWriteNewFile(*newFilePath0644, 0o644),
		readWriteNewFile(*newFilePath0666, 0o666),
		readWriteNewFile(*newFilePath0660, 0o660),
		readWriteNewFile(*newFilePath0777, 0o777),
		fileMode(*fileModePath),
		filePerm(*filePermPath),
		fileOwner(*fileOwnerPath),
		readFileContent(*readFileContentPath),
		readFileContentInLoop(ctx, *readFileContentInLoopPath, *retryDuration, *breakOnExpectedContent),
	} {
		if err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) != 0 {
		os.Exit(1)
	}
	os.Exit(0)
}

func fsType(path string) error {
	if path == "" {
		return nil
	}
	buf := syscall.Statfs_t{}
	if err := syscall.Statfs(path, &buf); err != nil {
		fmt.Printf("error from statfs(%q): %v\n", path, err)
		return err
	}
	fmt.Printf("mount type of %q: %v\n", path, buf.Type)
	return nil
}

func fileMode(path string) error {
	if path == "" {
		return nil
	}
	fileinfo, err := os.Stat(path)
	if err != nil {
		fmt.Printf("error from Stat(%q): %v\n", path, err)
		return err
	}
	fmt.Printf("mode of file %q: %v\n", path, fileinfo.Mode())
	return nil
}

func filePerm(path string) error {
	if path == "" {
		return nil
	}
	fileinfo, err := os.Stat(path)
	if err != nil {
		fmt.Printf("error from Stat(%q): %v\n", path, err)
		return err
	}
	fmt.Printf("perms of file %q: %v\n", path, fileinfo.Mode().Perm())
	return nil
}

func fileOwner(path string) error {
	if path == "" {
		return nil
	}
	buf := syscall.Stat_t{}
	if err := syscall.Stat(path, &buf); err != nil {
		fmt.Printf("error from stat(%q): %v\n", path, err)
		return err
	}
	fmt.Printf("owner UID of %q: %v\n", path, buf.Uid)
	fmt.Printf("owner GID of %q: %v\n", path, buf.Gid)
	return nil
}

func readFileContent(path string) error {
	if path == "" {
		return nil
	}
	contentBytes, err := os.ReadFile(path)
	if err != nil {
		fmt.Printf("error reading file content for %q: %v\n", path, err)
		return err
	}
	fmt.Printf("content of file %q: %v\n", path, string(contentBytes))
	return nil
}

const initialContent string = "mount-tester new file\n"

func readWriteNewFile(path string, perm os.FileMode) error {
	if path == "" {
		return nil
	}
	if err := os.WriteFile(path, []byte(initialContent), perm); err != nil {
		fmt.Printf("error writing new file %q: %v\n", path, err)
		return err
	}
	return readFileContent(path)
}

func readFileContentInLoop(ctx context.Context, filePath string, retryDuration int, breakOnExpectedContent bool) error {
	if filePath == "" {
		return nil
	}
	var err error
	retryTime := time.Second * time.Duration(retryDuration)
	for start := time.Now(); time.Since(start) < retryTime; {
		var contentBytes []byte
		contentBytes, err = os.ReadFile(filePath)
		if err != nil {
			fmt.Printf("Error reading file %s: %v, retrying\n", filePath, err)
		} else {
			fmt.Printf("content of file %q: %v\n", filePath, string(contentBytes))
			if breakOnExpectedContent {
				if string(contentBytes) == initialContent {
					break
				}
				fmt.Printf("Unexpected content. Expected: %s. Retrying\n", initialContent)
			}
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(500 * time.Millisecond):
		}
	}
	return err
}
