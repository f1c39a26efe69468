// Image sources: a folder of images (or of class subfolders), or a list file
// of "path label" lines, made into the list of images a reader serves.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace strata {

struct ImageItem {
  std::string path;
  int32_t label = -1;  // -1: none given
};

// What walking a folder left out, for the note the reader prints once at
// the start (ImageData, strata embed): nothing is left out silently.
struct ImageWalkNotes {
  // Files not in a format strata reads, by lower-case extension (".webp";
  // "" for a name without one), and the first of them met.
  std::map<std::string, int64_t> skipped_by_extension;
  std::string first_skipped;
  // Folder links that lead to a folder already read (a link loop, or a second
  // way to one folder), each "link -> folder"; not read again.
  std::vector<std::string> repeated_folders;
  // One line per kind of thing left out (no "note:" prefix); empty when none.
  std::vector<std::string> lines() const;
};

// Every image file (by extension, see has_image_extension) under `dir`, at
// any depth, sorted by name at each level with a folder's files before its
// subfolders. Links are followed, but each real folder (device and inode) is
// read once: a link loop, or a second link to a folder, is read no further.
// IoError when `dir` is not a readable folder. `notes` (optional) receives
// what was left out.
std::vector<ImageItem> walk_images(const std::string& dir, ImageWalkNotes* notes = nullptr);
// ImageFolder layout: each subfolder of `dir` is a class; classes sorted by
// name get labels 0..K-1, and each class holds the images under it at any
// depth (each real folder read once over all classes). ConfigError when there
// are no class subfolders or no images. `class_names` (optional) receives the
// folder names in label order.
std::vector<ImageItem> list_image_folder(const std::string& dir, std::vector<std::string>* class_names,
                                         ImageWalkNotes* notes = nullptr);
// A list file: one "path label" per line (label: an integer; lines with no
// integer last field are a path alone, label -1); blank lines and lines
// starting with '#' are skipped. Relative paths are joined to root_folder.
// ConfigError naming the file and line for a malformed line or an empty list.
std::vector<ImageItem> read_image_list(const std::string& list_path, const std::string& root_folder);
// A folder -> list_image_folder (class labels) when it has subfolders,
// else walk_images; a file -> read_image_list.
std::vector<ImageItem> read_image_source(const std::string& source, const std::string& root_folder,
                                         ImageWalkNotes* notes = nullptr);

}  // namespace strata
