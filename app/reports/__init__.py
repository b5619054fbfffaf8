"""Reports of a passage search for the tools plagiarism checkers use: PAN's text-alignment XML
(``pan_xml``) and a self-contained HTML page with the text beside each source (``html_report``)."""
