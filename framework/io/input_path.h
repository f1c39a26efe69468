// Where a relative path written in a solver or net file points.
//
// Caffe resolves every relative path against the working directory: its own
// files are run from the Caffe root and name paths from there
// (net: "examples/mnist/lenet_train_test.prototxt"). strata's own files name
// paths beside themselves (net: "train.prototxt") so they run from anywhere.
// Both spellings work: a relative path is looked up in both places. Solver
// files look in the working directory first, as Caffe does; data files named
// in a net look beside the net first, so that a strata net's own
// "../../data/x.npy" means what it always meant even where the working
// directory happens to hold another file of that name (a Caffe path such as
// "examples/mnist/x" exists only from the Caffe root).
#pragma once

#include <string>

namespace strata {

enum class FoundIn {
  kAbsolute,          // the path is absolute: taken as written
  kWorkingDirectory,  // exists relative to the working directory (Caffe's rule)
  kBesideFile,        // exists relative to the folder of the file that names it
  kNowhere,           // exists in neither place
};

struct InputPath {
  // What to open: as written when found in the working directory only (or
  // first, and a different file lies beside the naming file), joined to the
  // naming file's folder otherwise (also when both places hold the same file,
  // and when found nowhere, so that an error names the place strata's own
  // files use).
  std::string path;
  FoundIn found = FoundIn::kNowhere;
  // Set when the path was found in the place looked at first and a different
  // file of that name also lies in the other: that file's path.
  std::string shadowed;
};

enum class LookFirst { kWorkingDirectory, kBesideFile };

// Looks `path` up as described above; `beside_dir` is the folder of the file
// that names it ("" for the working directory).
InputPath find_input_path(const std::string& path, const std::string& beside_dir,
                          LookFirst first = LookFirst::kWorkingDirectory);

// "'/home/me/x' (the working directory) and 'models/y/x' (beside the file)",
// for messages about a path found nowhere.
std::string input_path_places(const std::string& path, const std::string& beside_dir);

// The working directory, or "." when it cannot be read.
std::string working_directory();

}  // namespace strata
